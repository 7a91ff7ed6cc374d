"""OpenVINO at the shapes a run feeds, for a graph that does not compile with dynamic dims.

Some graphs compile on OpenVINO's CPU plugin only once every dim is known: a Squeeze with no
axes after a MatMul of dynamic batch has an output of dynamic rank, and the plugin says "CPU
plug-in doesn't support Squeeze operation with dynamic rank". The job knows its shapes (the input
profile's, the data's): they are what it feeds. So such a model is compiled at its first run,
reshaped (`Model.reshape`) to that run's input shapes, and once more for each other set of shapes
it is fed (a few kept, the least recently used dropped), as the TensorRT backend builds one
engine per shape signature. A graph that does not compile reshaped either raises ModelLoadError
with both of OpenVINO's sentences: this backend cannot load it.

The same holds an IR that Optistudio fixed at its run's input shapes (the ov_static pass, marked
in the IR's rt_info as SPECIALIZED): OpenVINO's CPU plugin runs a graph compiled at static shapes
faster than the dynamic one fed the same (up to a third at one thread on the zoo's dynamic
models, docs/BENCHMARKS.md), so the IR is compiled at its own shapes first and at any other
shapes it is fed (a batching job's batch sizes) reshaped, as its dynamic original would run.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from optistudio.core.backends.base import LoadedModel
from optistudio.core.errors import InferenceFailed, ModelLoadError

logger = logging.getLogger(__name__)

KEPT_SHAPES = 8
"""Compiled models kept, one per set of input shapes (a batching job feeds up to 6 batch sizes)."""
SPECIALIZED = ["optistudio", "static_shapes"]
"""The rt_info path where the ov_static pass marks the IR it fixed at its run's shapes."""
Shapes = tuple[tuple[str, tuple[int, ...]], ...]


class ReshapedOpenVinoModel(LoadedModel):
    """A graph compiled per set of input shapes, at the first run fed each."""

    def __init__(
        self,
        compile_at: Callable[[dict[str, list[int]]], Any],
        describe: Callable[[Any], dict[str, Any]],
        message: Callable[[Exception], str],
        why: str,
        *,
        first: tuple[dict[str, list[int]], Any] | None = None,
    ) -> None:
        """`compile_at(shapes)` compiles the graph reshaped to `shapes`; `describe(compiled)`
        gives the details to record; `message(exc)` OpenVINO's sentence; `why` why the graph is
        compiled per shapes (the dynamic graph's refusal, or the IR's fixed shapes); `first`
        the shapes it was compiled at already and that compiled model."""
        self._compile_at, self._describe, self._message = compile_at, describe, message
        self.why = why
        self._compiled: OrderedDict[Shapes, tuple[Any, Any]] = OrderedDict()
        self.details: dict[str, Any] = {"dynamic_shapes": self._said(None)}
        self._open = True
        if first is not None:
            shapes, compiled = first
            key = tuple(sorted((name, tuple(dims)) for name, dims in shapes.items()))
            self._compiled[key] = (compiled, compiled.create_infer_request())
            self.details |= describe(compiled)

    def run(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        if not self._open:
            raise InferenceFailed("This OpenVINO model was closed; load it again to run it.")
        compiled, request = self._for(feeds)
        try:
            results = request.infer(feeds)
        except Exception as exc:  # the runtime raises its own untyped errors
            raise InferenceFailed(
                f"OpenVINO could not run this model reshaped to {_shown(feeds)}: "
                f"{self._message(exc)}"
            ) from exc
        return [np.asarray(results[output]) for output in compiled.outputs]

    def close(self) -> None:
        self._open = False
        self._compiled.clear()

    def _for(self, feeds: dict[str, np.ndarray]) -> tuple[Any, Any]:
        key: Shapes = tuple(sorted((name, tuple(array.shape)) for name, array in feeds.items()))
        if key in self._compiled:
            self._compiled.move_to_end(key)
            return self._compiled[key]
        shapes = {name: list(dims) for name, dims in key}
        try:
            compiled = self._compile_at(shapes)
        except Exception as exc:  # the runtime raises its own untyped errors
            raise ModelLoadError(
                f"OpenVINO could not load this model ({self.why}) reshaped to "
                f"{_shown(feeds)}: {self._message(exc)}",
                hint="Run it with onnxruntime instead.",
            ) from exc
        logger.info("OpenVINO compiled the model reshaped to %s", _shown(feeds))
        self._compiled[key] = (compiled, compiled.create_infer_request())
        while len(self._compiled) > KEPT_SHAPES:
            self._compiled.popitem(last=False)
        self.details |= self._describe(compiled)
        self.details["dynamic_shapes"] = self._said(_shown(feeds))
        return self._compiled[key]

    def _said(self, latest: str | None) -> str:
        at = f"; last compiled at {latest}" if latest else ""
        return f"{self.why}: compiled reshaped to each run's input shapes{at}"


def _shown(feeds: dict[str, np.ndarray]) -> str:
    return ", ".join(f"{name}={list(array.shape)}" for name, array in feeds.items())
