"""One model loaded for an accuracy check: its declared inputs and outputs, feeds cast to its
input dtypes, and outputs returned as arrays whatever the backend gives (scikit-learn's ZipMap
maps, sequences of tensors)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.backends.base import Precision
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.samples import Declared

NO_SIZE_LIMIT = 2**62
"""Models compared here already passed intake; its upload size cap does not apply again."""


class ComparedModel:
    """One model loaded on a backend (ONNX Runtime by default), with its declared input dtypes."""

    def __init__(
        self,
        path: Path,
        *,
        backend: str = "onnxruntime",
        interface: Path | None = None,
        precision: Precision = "fp32",
    ) -> None:
        info = inspect_model(interface or path, max_bytes=NO_SIZE_LIMIT)
        self.inputs: list[TensorSpec] = info.inputs
        self.dtypes = {spec.name: np.dtype(spec.dtype) for spec in info.inputs}
        self.output_names = [spec.name for spec in info.outputs]
        self.declared: list[Declared] = [spec.shape for spec in info.outputs]
        """The outputs' declared shapes: they pick a sample axis, the run's shapes decide."""
        options = SessionOptions(precision=precision)
        self.model: LoadedModel = get_backend(backend).load(path, options)

    def run(self, batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        feeds = {name: cast(array, self.dtypes.get(name)) for name, array in batch.items()}
        return [
            as_array(name, output)
            for name, output in zip(self.output_names, self.model.run(feeds), strict=True)
        ]

    def close(self) -> None:
        self.model.close()


def as_array(name: str, output: Any) -> np.ndarray:
    """An output as an array: a sequence of maps (scikit-learn's ZipMap, {class: probability}
    per sample) as [samples, classes] in class order, a sequence of equal tensors stacked."""
    if isinstance(output, np.ndarray):
        return output
    rows = list(output)
    if rows and all(isinstance(row, dict) for row in rows):
        return np.array([[row[key] for key in sorted(row)] for row in rows])
    try:
        return np.stack([np.asarray(row) for row in rows]) if rows else np.asarray(rows)
    except ValueError:
        raise DataMismatch(
            f"Output {name!r} is a sequence of tensors of different shapes, which cannot be "
            "compared sample by sample."
        ) from None


def cast(array: np.ndarray, dtype: np.dtype | None) -> np.ndarray:
    return array if dtype is None or array.dtype == dtype else array.astype(dtype)
