"""An upload's name and a .zip of a model's folder, judged before anything is written.

What a hostile or careless archive can do is bounded here, each refusal a ModelRejected
sentence with a hint, never an OSError or RecursionError from the file system:
- members: at most MAX_ZIP_MEMBERS, counted from the central directory before zipfile builds
  an object per member (200,000 empty members made 200,000 files);
- names: relative, no '..', each part at most MAX_NAME_BYTES bytes (the file system's limit),
  at most MAX_MEMBER_DEPTH folders deep and MAX_MEMBER_PATH bytes long;
- no symbolic links, no encrypted members, at least one file, and no more bytes unpacked than
  the upload limit (zipfile never writes more than a member's declared size);
- an error while unpacking (a corrupt stream, a file where a folder must go) is a refusal that
  names the member, never a server path.
The upload's own name must be a plain file name: not empty, '.', '..', with no path separator
or NUL, at most MAX_NAME_BYTES bytes.
"""

from __future__ import annotations

import lzma
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from optistudio.core.data.zip_directory import check_member_count
from optistudio.core.errors import DataMismatch, ModelRejected

MAX_ZIP_MEMBERS = 10_000
"""Most members (files and folders) a model's .zip may hold; a decoder folder holds about 10."""
MAX_NAME_BYTES = 255
"""Longest file or folder name, in UTF-8 bytes (what Linux, macOS and Windows file systems hold)."""
MAX_MEMBER_DEPTH = 32
"""Deepest a member may sit, in folders and its own name."""
MAX_MEMBER_PATH = 1024
"""Longest member path, in UTF-8 bytes."""
_ZIP_HINT = "Zip the model's folder again, or upload the .onnx file itself."
_NAME_HINT = "Zip the folder with short, relative names (its files and one folder above them)."
_UNPACK_ERRORS = (
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    EOFError,
    OSError,
    NotImplementedError,
    RuntimeError,
)


def upload_name(filename: str) -> str:
    """`filename` when it is a plain file name; ModelRejected otherwise."""
    plain = filename not in ("", ".", "..") and not any(c in filename for c in "/\\\x00")
    if not plain or len(filename.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        shown = filename if len(filename) <= 80 else filename[:77] + "..."
        raise ModelRejected(
            f"The upload's name {shown!r} is not a file name this studio can keep.",
            hint=f"Rename the file to a plain name of at most {MAX_NAME_BYTES} bytes, such as "
            "model.onnx or model.zip, and upload it again.",
        )
    return filename


def unpack_folder(archive: Path, folder: Path, max_bytes: int) -> None:
    """Unpack the .zip at `archive` into `folder` when every member passes (module docstring)."""
    label = repr(archive.name)
    try:
        with archive.open("rb") as stream:
            check_member_count(stream, limit=MAX_ZIP_MEMBERS, label=label, hint=_ZIP_HINT)
            with zipfile.ZipFile(stream) as zipped:
                members = zipped.infolist()
                files = check_members(members, max_bytes)
                _extract(zipped, files, folder)
    except DataMismatch as exc:
        raise ModelRejected(exc.message, hint=exc.hint) from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError):
        raise ModelRejected(f"{label} is not a readable .zip.", hint=_ZIP_HINT) from None


def check_members(members: list[zipfile.ZipInfo], max_bytes: int) -> list[zipfile.ZipInfo]:
    """The file members, when no member is refused; ModelRejected naming the first that is."""
    for member in members:
        _check_member(member)
    files = [member for member in members if not member.is_dir()]
    if not files:
        raise ModelRejected(
            "The .zip holds no files." if not members else "The .zip holds only folders.",
            hint="Zip the model's folder with its files in it.",
        )
    if sum(member.file_size for member in files) > max_bytes:
        raise ModelRejected(
            f"The .zip unpacks to more than the upload limit of {max_bytes // 2**20} MiB.",
            hint="Raise OPTISTUDIO_MAX_UPLOAD_MB if this model is expected to be this big.",
        )
    return files


def _check_member(member: zipfile.ZipInfo) -> None:
    name = member.filename
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or ".." in path.parts or _drive(name):
        raise _refused(
            name, "points outside the model's folder", "Zip the folder with relative names."
        )
    if stat.S_ISLNK(member.external_attr >> 16):
        raise _refused(name, "is a symbolic link", "Zip the files themselves, not links to them.")
    if member.flag_bits & 0x1:
        raise _refused(name, "is encrypted", "Zip the folder again without a password.")
    if any(len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES for part in path.parts):
        raise _refused(name, f"has a name part over {MAX_NAME_BYTES} bytes", _NAME_HINT)
    if len(path.parts) > MAX_MEMBER_DEPTH:
        raise _refused(name, f"sits more than {MAX_MEMBER_DEPTH} folders deep", _NAME_HINT)
    if len(name.encode("utf-8", "surrogatepass")) > MAX_MEMBER_PATH:
        raise _refused(name, f"has a path over {MAX_MEMBER_PATH} bytes", _NAME_HINT)


def _drive(name: str) -> bool:
    return len(name) >= 2 and name[1] == ":" and name[0].isalpha()


def _extract(zipped: zipfile.ZipFile, files: list[zipfile.ZipInfo], folder: Path) -> None:
    for member in files:
        try:
            zipped.extract(member, folder)
        except _UNPACK_ERRORS as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "corrupt data"
            raise _refused(member.filename, f"could not be unpacked ({why})", _ZIP_HINT) from None


def _refused(name: str, problem: str, hint: str) -> ModelRejected:
    shown = name if len(name) <= 120 else name[:60] + "..." + name[-40:]
    return ModelRejected(f"The .zip member {shown!r} {problem}.", hint=hint)
