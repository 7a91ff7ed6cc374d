"""A model on a backend picked from the registry, ready to predict: `optistudio.InferenceBackend`.

    backend = InferenceBackend.create(DeviceType.CPU).load("model.onnx")   # or "cpu", "CPU"
    outputs = backend.predict({"x": array})        # the output arrays, in the model's order
    outputs = backend.predict(array)               # the same, for a model with one input

`create` takes the backend named, or else the first available backend on this machine that lists
the device's kind: ONNX Runtime, then OpenVINO (the runtimes that run the ONNX file as it is),
then the others by name (LiteRT, which converts the model first, only when neither is there); the
runtime is imported only then. The other
keyword arguments are `SessionOptions` fields (threads, precision, memory_pool_ratio, ...),
checked at once: a misspelt one is an InvalidSpec naming it. The library face exports this
class as `optistudio.InferenceBackend`; runtimes implement `core.backends.base.InferenceBackend`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from pydantic import ValidationError

from optistudio.core.backends.base import (
    DeviceType,
    InferenceBackend,
    LoadedModel,
    SessionOptions,
    backends,
    get_backend,
    named_feeds,
)
from optistudio.core.errors import BackendUnavailable, InvalidSpec, describe_validation_error


class Predictor:
    """One backend with its options and, once loaded, one model; use as a context manager."""

    def __init__(self, backend: InferenceBackend, options: SessionOptions) -> None:
        self.backend = backend
        self.options = options
        self._model: LoadedModel | None = None
        self._path: Path | None = None
        self._input_names: list[str] | None = None

    @classmethod
    def create(
        cls,
        device: DeviceType | str = "cpu",
        *,
        backend: str | None = None,
        model: str | Path | None = None,
        **options: Any,
    ) -> Predictor:
        """A predictor on `device` (DeviceType.CPU, 'cpu', 'CPU', 'cuda:0', ...); loads `model`
        when given.

        Raises UnknownName for a backend not registered, BackendUnavailable when none can run
        on the device here, InvalidSpec for a bad option.
        """
        session_options = session_options_from({**options, "device": device})
        chosen = get_backend(backend or pick_backend(session_options.device))
        predictor = cls(chosen, session_options)
        return predictor.load(model) if model is not None else predictor

    @property
    def name(self) -> str:
        """The backend's registry name, e.g. 'onnxruntime'."""
        return self.backend.name

    @property
    def details(self) -> dict[str, Any]:
        """What the runtime did with the loaded model (providers, threads, memory pool...)."""
        return self._model.details if self._model is not None else {}

    def load(self, model: str | Path) -> Predictor:
        """Load an ONNX file, replacing the model loaded before; returns this predictor."""
        loaded = self.backend.load(Path(model), self.options)
        self.close()
        self._model, self._path = loaded, Path(model)
        return self

    def predict(self, inputs: Mapping[str, Any] | np.ndarray) -> list[np.ndarray]:
        """Run the model once on arrays by input name, or on one array for a model with one
        input; returns its outputs in model order."""
        if self._model is None:
            raise InvalidSpec(
                f"No model is loaded on this {self.name} predictor.",
                hint="Call .load('model.onnx') first, or pass model= to create().",
            )
        if isinstance(inputs, Mapping):
            return self._model.run(named_feeds(inputs, []))
        return self._model.run(named_feeds(inputs, self._names()))

    def _names(self) -> list[str]:
        """The loaded ONNX file's inputs (read once, when a bare array first asks)."""
        if self._input_names is None:
            self._input_names = graph_input_names(self._path) if self._path else []
        return self._input_names

    def close(self) -> None:
        """Release the loaded model (a later predict needs a new load)."""
        if self._model is not None:
            self._model.close()
            self._model, self._path, self._input_names = None, None, None

    def __enter__(self) -> Predictor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Predictor({self.name!r}, device={self.options.device!r})"


def graph_input_names(model: Path) -> list[str]:
    """The ONNX file's feeds (graph inputs that are not initializers), read without its
    weights' external data; [] for a file of another format (a .tflite)."""
    if model.suffix.lower() != ".onnx":
        return []
    graph = onnx.load(str(model), load_external_data=False).graph
    stored = {tensor.name for tensor in graph.initializer}
    return [value.name for value in graph.input if value.name not in stored]


PREFERRED = ("onnxruntime", "openvino")
"""Backends `pick_backend` tries first, in this order: they run the ONNX file as it is."""


def pick_backend(device: str) -> str:
    """The first registered backend that lists the device's kind and runs it here: PREFERRED
    ones first, then the rest by name (installing an extra such as LiteRT must not change which
    runtime a plain `create("cpu")` gets)."""
    kind = device.partition(":")[0]
    reasons = []
    for spec in sorted(backends, key=lambda spec: _rank(spec.name)):
        if kind not in spec.devices:
            continue
        availability = spec.create().availability()
        if availability.ok and kind in availability.devices:
            return spec.name
        reasons.append(f"{spec.name}: {availability.reason or f'no {kind} device here'}")
    raise BackendUnavailable(
        f"No registered backend can run on {device!r} here"
        + (f" ({'; '.join(reasons)})." if reasons else "."),
        hint=f"Registered backends: {', '.join(backends.names())}. Pass backend=... or "
        "another device.",
    )


def _rank(name: str) -> tuple[int, str]:
    return (PREFERRED.index(name) if name in PREFERRED else len(PREFERRED), name)


def session_options_from(values: dict[str, Any]) -> SessionOptions:
    """SessionOptions from keyword arguments, with an InvalidSpec naming each bad field."""
    try:
        return SessionOptions.model_validate(values)
    except ValidationError as exc:
        raise InvalidSpec(
            f"Invalid backend options: {describe_validation_error(exc)}",
            hint="The options are SessionOptions fields: "
            f"{', '.join(SessionOptions.model_fields)}.",
        ) from None
