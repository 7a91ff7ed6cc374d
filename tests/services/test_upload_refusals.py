"""Hostile or careless uploads through the studio's own entry (`add_upload`): each is one
ModelRejected sentence with a hint, never FileNotFoundError, OSError or RecursionError, and
leaves nothing in the scratch folder and no model in the store (issue 39, cases 6 and 7)."""

from __future__ import annotations

import io
import stat
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from optistudio.core.data.zip_directory import check_member_count
from optistudio.core.errors import DataMismatch, ModelRejected
from optistudio.services.catalog import add_upload
from optistudio.services.upload_archive import MAX_MEMBER_DEPTH, MAX_NAME_BYTES, MAX_ZIP_MEMBERS


def archive(*members: tuple[str | zipfile.ZipInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, data in members:
            zipped.writestr(name, data)
    return buffer.getvalue()


def many_empty_members(count: int) -> bytes:
    """A .zip of `count` empty stored members, its records packed by hand (zipfile takes
    seconds per 100,000 members to write them)."""
    local, central, offset = [], [], 0
    for index in range(count):
        name = f"f{index}".encode()
        header = struct.pack("<4s5H3I2H", b"PK\x03\x04", 20, 0, 0, 0, 33, 0, 0, 0, len(name), 0)
        local.append(header + name)
        central.append(
            struct.pack(
                "<4s6H3I5HII", b"PK\x01\x02", 20, 20, 0, 0, 0, 33, 0, 0, 0, len(name), 0, 0, 0, 0,
                0, offset,
            )
            + name
        )  # fmt: skip
        offset += len(header) + len(name)
    directory = b"".join(central)
    shown = min(count, 0xFFFF)
    end = struct.pack("<4s4H2IH", b"PK\x05\x06", 0, 0, shown, shown, len(directory), offset, 0)
    return b"".join(local) + directory + end


def folders_only() -> bytes:
    return archive(("model/", b""), ("model/inner/", b""))


def symlink() -> bytes:
    link = zipfile.ZipInfo("model/model.onnx")
    link.external_attr = (stat.S_IFLNK | 0o777) << 16
    return archive((link, b"/etc/passwd"))


def encrypted() -> bytes:
    """A member flagged as encrypted (bit 0), in its local header and in the directory."""
    data = bytearray(archive(("model.onnx", b"\x08\x07")))
    data[6] |= 0x1
    data[data.index(b"PK\x01\x02") + 8] |= 0x1
    return bytes(data)


def future_version() -> bytes:
    """A member asking for zip version 12.0 to extract (zipfile raised NotImplementedError)."""
    data = bytearray(archive(("model.onnx", b"\x08\x07")))
    data[data.index(b"PK\x01\x02") + 6] = 120
    return bytes(data)


def corrupt() -> bytes:
    data = bytearray(archive(("model.onnx", bytes(range(256)) * 64)))
    start = data.index(b"model.onnx") + len("model.onnx") + 20  # inside the deflated bytes
    data[start : start + 40] = bytes(40)
    return bytes(data)


CASES: dict[str, tuple[str, Callable[[], bytes], str]] = {
    "200000-members": (
        "many.zip",
        lambda: many_empty_members(200_000),
        "'many.zip' holds more than 10,000 members.",
    ),
    "empty-zip": ("e.zip", lambda: archive(), "The .zip holds no files."),
    "folders-only": ("d.zip", folders_only, "The .zip holds only folders."),
    "300-char-name": (
        "long.zip",
        lambda: archive(("m" * 296 + ".onnx", b"x")),
        f"The .zip member '{'m' * 60}...{'m' * 35}.onnx' has a name part over 255 bytes.",
    ),
    "2100-levels": (
        "deep.zip",
        lambda: archive(("a/" * 2100 + "model.onnx", b"x")),
        f"The .zip member '{'a/' * 30}...{'a/' * 15}model.onnx' sits more than 32 folders deep.",
    ),
    "symlink": ("l.zip", symlink, "The .zip member 'model/model.onnx' is a symbolic link."),
    "encrypted": ("c.zip", encrypted, "The .zip member 'model.onnx' is encrypted."),
    "file-where-a-folder-goes": (
        "f.zip",
        lambda: archive(("model", b"x"), ("model/model.onnx", b"x")),
        "The .zip member 'model/model.onnx' could not be unpacked (Not a directory).",
    ),
    "corrupt-data": (
        "bad.zip",
        corrupt,
        "The .zip member 'model.onnx' could not be unpacked (corrupt data).",
    ),
    "future-zip-version": ("v.zip", future_version, "'v.zip' is not a readable .zip."),
    "not-a-zip": ("n.zip", lambda: b"PK\x03\x04 not really", "'n.zip' is not a readable .zip."),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_hostile_archive_is_one_sentence_and_leaves_nothing(  # type: ignore[no-untyped-def]
    db_factory, app_settings, case: str
) -> None:
    filename, build, message = CASES[case]

    with pytest.raises(ModelRejected) as refused:
        add_upload(db_factory, app_settings, io.BytesIO(build()), filename=filename)

    assert refused.value.message == message
    assert refused.value.hint
    _assert_nothing_left(app_settings)


@pytest.mark.parametrize(
    "filename",
    ["..", "", ".", "../model.onnx", "a/model.onnx", "a\\model.onnx", "m\x00.onnx", "m" * 300],
    ids=["dotdot", "empty", "dot", "parent", "slash", "backslash", "nul", "300-chars"],
)
def test_an_upload_name_that_is_not_a_plain_file_name_is_refused(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model: Path, filename: str
) -> None:
    with pytest.raises(ModelRejected) as refused:
        add_upload(db_factory, app_settings, io.BytesIO(tiny_model.read_bytes()), filename=filename)

    assert "is not a file name this studio can keep" in refused.value.message
    assert "at most 255 bytes" in (refused.value.hint or "")
    _assert_nothing_left(app_settings)


def test_the_member_count_is_exact_at_the_cap_and_read_as_zipfile_reads_it() -> None:
    data = many_empty_members(20)
    assert len(zipfile.ZipFile(io.BytesIO(data)).infolist()) == 20  # a well-formed archive

    check_member_count(io.BytesIO(data), limit=20, label="'z.zip'", hint="h")
    with pytest.raises(DataMismatch, match="'z.zip' holds more than 19 members"):
        check_member_count(io.BytesIO(data), limit=19, label="'z.zip'", hint="h")
    assert MAX_ZIP_MEMBERS == 10_000


def test_a_folder_just_under_the_caps_is_stored(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model: Path
) -> None:
    deep = "m/" + "d/" * (MAX_MEMBER_DEPTH - 3) + "n" * MAX_NAME_BYTES
    data = archive(("m/model.onnx", tiny_model.read_bytes()), (deep, b"notes"), ("m/e/", b""))

    entry = add_upload(db_factory, app_settings, io.BytesIO(data), filename="m.zip")

    assert entry.created and entry.name == "m"
    _assert_nothing_left(app_settings, stored=1)


def _assert_nothing_left(settings: object, stored: int = 0) -> None:
    incoming = settings.data_dir / "incoming"  # type: ignore[attr-defined]
    assert list(incoming.iterdir()) == []
    models = settings.artifact_dir / "models"  # type: ignore[attr-defined]
    graphs = list(models.rglob("*.onnx")) if models.exists() else []
    assert len(graphs) == stored
