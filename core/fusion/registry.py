"""What the registry and the UI know about a fusion pattern without importing the rewriter."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.loader import load
from optistudio.core.registry import Registry

if TYPE_CHECKING:
    from onnxscript.rewriter.pattern import RewriteRule

ANY_BACKEND = "*"
"""In `backends`: the fused result is standard ONNX, so every backend runs it."""


class FusionPatternInfo(BaseModel):
    """A named fusion pattern: what it fuses, where the result has a kernel, when it runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Stable lowercase name stored in recipes and the database.")
    label: str
    description: str = Field(description="What it fuses and why the result is faster.")
    implementation: str = Field(
        description="'module:function' returning an onnxscript RewriteRule or a list of them."
    )
    backends: list[str] = Field(
        description="Backends with a kernel for the fused result; ['*'] for standard ONNX."
    )
    default_order: int = Field(description="Position when no order is given; lower runs first.")

    def supports(self, backend: str) -> bool:
        """Whether `backend` has a kernel for what this pattern produces."""
        return ANY_BACKEND in self.backends or backend in self.backends

    def rules(self) -> list[RewriteRule]:
        """The rewrite rules, built by importing the implementation (and onnxscript)."""
        built = load(self.implementation)()
        return list(built) if isinstance(built, (list, tuple)) else [built]


class FusionPatternRegistry(Registry[FusionPatternInfo]):
    """The fusion patterns by name; a pattern registered in-process can be looked up without
    an error and taken back (`optistudio.core.fusion.user`)."""

    def find(self, name: str) -> FusionPatternInfo | None:
        """The pattern registered under `name`, or None."""
        self._load_entry_points()
        return self._entries.get(name)

    def unregister(self, name: str) -> FusionPatternInfo | None:
        """Forget `name` in this process; returns the pattern it held, or None."""
        self._load_entry_points()
        return self._entries.pop(name, None)


fusion_patterns = FusionPatternRegistry("fusion pattern", "optistudio.fusion_patterns")
