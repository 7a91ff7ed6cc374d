"""How many members a .zip holds, counted from its central directory before zipfile reads it.

`zipfile.ZipFile` builds one ZipInfo per member of the central directory (a few hundred bytes
of memory each) whatever count the end record declares, so 512 MB of empty members is millions
of objects before any check runs. Here the end-of-central-directory record (and its zip64 form)
gives the directory's size and place; a directory larger than MAX_DIRECTORY_BYTES_PER_MEMBER x
the member cap is refused unread, and the rest is walked header by header (46 fixed bytes plus
name, extra field and comment lengths) until the count passes the cap.

An archive whose records cannot be found or walked is left to zipfile, which says so.
"""

from __future__ import annotations

import struct
from typing import IO

from optistudio.core.errors import DataMismatch

MAX_DIRECTORY_BYTES_PER_MEMBER = 512
"""Central-directory bytes allowed per member (46 fixed, a name, extra fields, a comment)."""
_END = b"PK\x05\x06"
_END_SIZE = 22
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_LOCATOR_SIZE = 20
_ZIP64_END = b"PK\x06\x06"
_ZIP64_END_SIZE = 56
_ENTRY = b"PK\x01\x02"
_ENTRY_SIZE = 46
_MAX_COMMENT = 65535


def check_member_count(stream: IO[bytes], *, limit: int, label: str, hint: str) -> None:
    """DataMismatch naming `label` when the archive's directory lists more than `limit`
    members or is too large to hold only that many; the stream is left at its start."""
    try:
        directory = _directory(stream, limit * MAX_DIRECTORY_BYTES_PER_MEMBER, label, hint)
    finally:
        stream.seek(0)
    if directory is not None and _count_entries(directory, limit) > limit:
        raise DataMismatch(f"{label} holds more than {limit:,} members.", hint=hint)


def _directory(stream: IO[bytes], most: int, label: str, hint: str) -> bytes | None:
    """The central directory's bytes; None when the end records are not where zip puts them."""
    end = _end_record(stream)
    if end is None:
        return None
    position, size = end
    if size > most:
        raise DataMismatch(
            f"{label} has a {size:,}-byte member directory, more than {most:,} bytes allows "
            "for the members it may hold.",
            hint=hint,
        )
    if position < size:
        return None
    stream.seek(position - size)
    return stream.read(size)


def _end_record(stream: IO[bytes]) -> tuple[int, int] | None:
    """(where the directory ends, its size) from the end records, the zip64 ones when there."""
    length = stream.seek(0, 2)
    start = max(0, length - _END_SIZE - _MAX_COMMENT)
    stream.seek(start)
    tail = stream.read()
    found = tail.rfind(_END)
    if found < 0 or len(tail) - found < _END_SIZE:
        return None
    position = start + found
    (size,) = struct.unpack("<I", tail[found + 12 : found + 16])
    return _zip64_end(stream, position) or (position, size)


def _zip64_end(stream: IO[bytes], end_position: int) -> tuple[int, int] | None:
    locator_at = end_position - _ZIP64_LOCATOR_SIZE
    if locator_at < 0:
        return None
    stream.seek(locator_at)
    locator = stream.read(_ZIP64_LOCATOR_SIZE)
    if not locator.startswith(_ZIP64_LOCATOR):
        return None
    record_at = locator_at - _ZIP64_END_SIZE
    stream.seek(max(0, record_at))
    record = stream.read(_ZIP64_END_SIZE)
    if record_at < 0 or not record.startswith(_ZIP64_END):
        return None
    (size,) = struct.unpack("<Q", record[40:48])
    return record_at, size


def _count_entries(directory: bytes, limit: int) -> int:
    """Entries in the directory, counted up to limit + 1 (then the walk stops)."""
    count, position = 0, 0
    while count <= limit and directory[position : position + 4] == _ENTRY:
        if position + _ENTRY_SIZE > len(directory):
            break
        name, extra, comment = struct.unpack("<HHH", directory[position + 28 : position + 34])
        position += _ENTRY_SIZE + name + extra + comment
        count += 1
    return count
