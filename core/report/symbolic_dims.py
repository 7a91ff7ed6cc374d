"""Shapes as people read them: a long symbolic dim becomes a short placeholder.

Shape inference names an output's dims by the expression that computes them ("floor((height +
-1) / 32) + 1" and longer, hundreds of characters on a detector's head). A shape written out
keeps short names ("batch", "sequence") and writes each long one as `s1`, `s2`, ... (the same
expression, the same placeholder), and `legend` gives every placeholder its full text once.
A written shape longer than `MAX_SHAPE` characters is cut with an ellipsis by `ellipsized`;
whoever shows the cut text keeps the whole one at hand (a tooltip, an expander).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

MAX_NAME = 16
"""A dim name up to this long that is a plain identifier is kept as it is."""
MAX_SHAPE = 40
"""A written shape longer than this is ellipsized."""
PLACEHOLDER = "s"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


@dataclass
class SymbolicDims:
    """Placeholders for the long symbolic dims met so far, in the order they were met."""

    placeholders: dict[str, str] = field(default_factory=dict)
    """Full expression -> its placeholder ('s1')."""

    def dim(self, dim: int | str | None) -> str:
        """One dim as written: its size, its short name, '?' when anonymous, else a placeholder."""
        if dim is None:
            return "?"
        if isinstance(dim, int) or is_short(dim):
            return str(dim)
        return self.placeholders.setdefault(dim, f"{PLACEHOLDER}{len(self.placeholders) + 1}")

    def dims(self, shape: Iterable[int | str | None]) -> list[int | str | None]:
        """The shape with each long symbolic dim replaced by its placeholder (sizes stay ints)."""
        return [d if isinstance(d, int) or d is None else self.dim(d) for d in shape]

    def shape(self, shape: Iterable[int | str | None]) -> str:
        """'[batch, 3, s1, s2]'."""
        return "[" + ", ".join(self.dim(d) for d in shape) + "]"

    def legend(self) -> dict[str, str]:
        """Placeholder -> the full expression it stands for."""
        return {short: full for full, short in self.placeholders.items()}


def is_short(name: str) -> bool:
    """A dim name readable as it is: a plain identifier of at most MAX_NAME characters."""
    return len(name) <= MAX_NAME and _IDENTIFIER.fullmatch(name) is not None


def ellipsized(text: str, limit: int = MAX_SHAPE) -> str:
    """`text`, or its first `limit` - 1 characters and '…' when it is longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
