"""Inference backends behind one interface; see `optistudio.core.backends.base`."""

from __future__ import annotations

from optistudio.core.backends.base import (
    Availability,
    BackendSpec,
    InferenceBackend,
    LoadedModel,
    SessionOptions,
    backends,
    get_backend,
)

__all__ = [
    "Availability",
    "BackendSpec",
    "InferenceBackend",
    "LoadedModel",
    "SessionOptions",
    "backends",
    "get_backend",
]
