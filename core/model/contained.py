"""Whether a file name a model or its config gives stays inside the model's folder.

A name stays inside when it is relative (POSIX and Windows alike), has no ".." part, and,
symbolic links followed, resolves under the folder. The answer comes from the name and the
folder alone: a name pointing outside is refused whether or not anything exists there, so a
refusal never tells an uploader which server paths exist.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath, PureWindowsPath


def contained(folder: Path, name: str) -> Path | None:
    """`folder` / `name` when `name` stays inside `folder` (module docstring), else None."""
    if not isinstance(name, str) or not name or "\x00" in name:
        return None
    windows = PureWindowsPath(name)
    if PurePosixPath(name).is_absolute() or windows.is_absolute() or windows.drive:
        return None
    if ".." in name.replace("\\", "/").split("/"):
        return None
    try:
        inside = (folder / name).resolve().is_relative_to(folder.resolve())
    except (OSError, RuntimeError, ValueError):  # a link loop, a name the system refuses
        return None
    return folder / name if inside else None
