"""The Models page's "Add from shared storage": what it offers (the operator's model roots and
the models found under them), without Streamlit. Adding goes through
services.catalog.add_from_storage, which checks the path and the model as an upload is checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from optistudio.services.model_roots import models_under_roots
from optistudio.services.settings import Settings


@dataclass(frozen=True)
class StorageOffer:
    """The roots a path may lie under, and the models listed there (a path can be typed too)."""

    roots: list[str]
    paths: list[str]

    def caption(self) -> str:
        roots = ", ".join(f"`{root}`" for root in self.roots)
        found = f"{len(self.paths)} model(s) found" if self.paths else "no model found yet"
        return (
            f"A model already on the workers' shared storage, under {roots} ({found}): checked "
            "and copied into the store as an upload is, with no upload size limit."
        )


def storage_offer(settings: Settings) -> StorageOffer | None:
    """None when the operator set no model roots (the feature is off)."""
    roots = settings.model_root_paths
    if not roots:
        return None
    return StorageOffer(roots=[str(root) for root in roots], paths=models_under_roots(settings))
