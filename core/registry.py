"""A small generic registry of named entries, filled from Python entry points.

Built-ins register through the same entry-point groups as third-party packages, so the extension
API is exercised on every start. Names are stable lowercase strings stored in the database.
An entry's value is a lightweight spec object: the UI can read its label, description and
capabilities without importing the heavy module behind it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Generic, Protocol, TypeVar

from optistudio.core.errors import UnknownName

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")


class Named(Protocol):
    name: str


T = TypeVar("T", bound=Named)


class Registry(Generic[T]):
    """Entries by stable name; `group` is the entry-point group that fills it lazily."""

    def __init__(self, kind: str, group: str) -> None:
        self.kind = kind
        self.group = group
        self._entries: dict[str, T] = {}
        self._loaded = False

    def register(self, entry: T) -> T:
        if not NAME_PATTERN.match(entry.name):
            raise ValueError(f"{self.kind} name {entry.name!r} must be lowercase snake_case")
        self._entries[entry.name] = entry
        return entry

    def get(self, name: str) -> T:
        self._load_entry_points()
        try:
            return self._entries[name]
        except KeyError:
            valid = ", ".join(sorted(self._entries)) or "none registered"
            raise UnknownName(
                f"Unknown {self.kind} {name!r}. Valid names: {valid}.",
                hint="Check the spelling, or install the package that provides it.",
            ) from None

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._entries)

    def __iter__(self) -> Iterator[T]:
        self._load_entry_points()
        return iter([self._entries[name] for name in sorted(self._entries)])

    def _load_entry_points(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        for point in entry_points(group=self.group):
            entry = point.load()
            if entry.name != point.name:
                raise ValueError(f"entry point {point.name!r} holds {self.kind} {entry.name!r}")
            self._entries.setdefault(entry.name, entry)
