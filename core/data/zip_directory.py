"""How many members a .zip holds, counted from its central directory before zipfile reads it.

`zipfile.ZipFile` builds one ZipInfo per member of the central directory (a few hundred bytes
of memory each) whatever count the end record declares, so 512 MB of empty members is millions
of objects before any check runs. Here the end-of-central-directory record (and its zip64 form)
gives where the directory ends and its size, the place zipfile reads it from, and the directory
is walked header by header (46 fixed bytes, then the name, extra field and comment lengths
they give), reading at most `limit` + 1 headers: what zipfile would parse, counted first.

An archive whose records cannot be found or walked is left to zipfile, which says so.
"""

from __future__ import annotations

import struct
from typing import IO

from optistudio.core.errors import DataMismatch

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
    members; the stream is left at its start."""
    try:
        end = _end_record(stream)
        count = 0 if end is None else _count_entries(stream, *end, limit)
    finally:
        stream.seek(0)
    if count > limit:
        raise DataMismatch(f"{label} holds more than {limit:,} members.", hint=hint)


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


def _count_entries(stream: IO[bytes], end: int, size: int, limit: int) -> int:
    """Entries of the directory of `size` bytes ending at `end`, counted up to limit + 1."""
    count, position = 0, end - size
    if position < 0:
        return 0
    while count <= limit and position + _ENTRY_SIZE <= end:
        stream.seek(position)
        header = stream.read(_ENTRY_SIZE)
        if len(header) < _ENTRY_SIZE or not header.startswith(_ENTRY):
            break
        name, extra, comment = struct.unpack("<HHH", header[28:34])
        position += _ENTRY_SIZE + name + extra + comment
        count += 1
    return count
