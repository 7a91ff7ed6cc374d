"""The check a graph with freed dims must pass (`optistudio.core.passes.free_dims`).

Three runs of the rewrite, on random inputs made alike for both models:
1. at the declared sizes, against the file itself: every output within `RTOL` of each value
   plus `ATOL` of the output's largest magnitude (the same tolerance as a freed batch's check,
   `batch_check`); integers and booleans exactly;
2. at two other sizes: it runs, every output keeps its rank, and each output dim the file
   declares as a number scales with the freed dims: for run r, the dim is v_0 at the declared
   sizes and v_r there, and some set S of freed dims (the empty set: a dim that never moves)
   has |v_r - v_0 prod_{d in S} (size_r(d) / size_0(d))| <= SLACK x that product + 2 in every
   run (padding and strides round a size: 32 -> 16 and 480 -> 240, but 30 -> 8 and 60 -> 15);
3. when the batch axis (dim 0) is freed: the rewrite at batch N gives, row for row, what N of
   its own runs at batch 1 give (`batch_check`), so no sample leaks into another.
A run that fails names the node the runtime names.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.data.inputs import synthesize_inputs
from optistudio.core.errors import PassFailed, first_line
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.batch_check import ATOL, RTOL, TOLERANCE, check_free_batch
from optistudio.core.passes.dims_rewrite import HINT

SLACK = 0.15
"""Share of a scaled dim that rounding may take (module docstring, step 2)."""
MAX_DIMS = 10
"""Freed dims the scaling test combines (2^10 sets at most)."""
SILENT = 4
"""ONNX Runtime's log severity for fatal errors only: a run the check expects may fail."""
NO_SIZE_LIMIT = 1 << 62
"""The check reads models of any size: intake decided on the size already."""
Shapes = dict[str, list[int]]


@dataclass(frozen=True)
class DimsCheck:
    """What the check ran and found."""

    max_abs_error: float
    sizes: list[Shapes]
    """The freed inputs' shapes of each run: the declared ones first."""
    outputs: list[Shapes] = field(default_factory=list)
    """Each run's output shapes."""
    moved: dict[str, dict[int, str]] = field(default_factory=dict)
    """The output dims that follow the freed dims, with the name each gets."""
    batch_rows: str = ""
    """The row-for-row line of a freed batch ('' when the batch stays)."""

    def line(self) -> str:
        runs = " and ".join(_shapes_text(s) for s in self.sizes[1:])
        line = (
            f"equal to the file at {_shapes_text(self.sizes[0])} (max |difference| "
            f"{self.max_abs_error:.2g}), runs at {runs} with its outputs scaling"
        )
        return f"{line}; {self.batch_rows}" if self.batch_rows else line


def check_free_dims(
    original: Path,
    rewritten: Path,
    sizes: list[Shapes],
    freed: dict[str, dict[int, str]],
    *,
    dims: dict[str, int] | None = None,
) -> DimsCheck:
    """Run the three checks of the module docstring; `sizes` are the freed inputs' shapes of
    each run (the declared ones first), `dims` the sizes of dims already dynamic."""
    specs = inspect_model(rewritten, max_bytes=NO_SIZE_LIMIT).inputs
    first = _feeds(specs, sizes[0], dims)
    expected = run_model(original, first, "the file at its declared sizes")
    got = run_model(rewritten, first, "the rewrite at the declared sizes")
    error = max(
        (_difference(name, got[name], value) for name, value in expected.items()), default=0.0
    )
    outputs = [{name: list(value.shape) for name, value in got.items()}]
    for shapes in sizes[1:]:
        ran = run_model(
            rewritten, _feeds(specs, shapes, dims), f"the rewrite at {_shapes_text(shapes)}"
        )
        outputs.append({name: list(value.shape) for name, value in ran.items()})
    declared = inspect_model(original, max_bytes=NO_SIZE_LIMIT).outputs
    moved = scaled_outputs(declared, outputs, sizes, freed)
    rows = _batch_rows(rewritten, specs, sizes[0], freed, dims)
    return DimsCheck(
        max_abs_error=error, sizes=sizes, outputs=outputs, moved=moved, batch_rows=rows
    )


def run_model(model: Path, feeds: dict[str, np.ndarray], what: str) -> dict[str, np.ndarray]:
    """The outputs by name; PassFailed naming the node the runtime names when it fails."""
    try:
        session = _session(model)
        outputs = session.run(None, feeds)
    except Exception as exc:  # the runtime raises its own untyped errors
        raise PassFailed(
            f"The dims cannot be freed: {what} {failed_node(exc)}.", hint=HINT
        ) from exc
    return {o.name: np.asarray(v) for o, v in zip(session.get_outputs(), outputs, strict=True)}


def _session(model: Path) -> Any:
    """ONNX Runtime on the CPU, unoptimized, logging nothing but fatal errors (the runs that
    find a dim the graph needs fail on purpose; the check says which node)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = SILENT
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def failed_node(exc: BaseException) -> str:
    """'fails at node 'fc' (Gemm)' from ONNX Runtime's message, else its first line."""
    found = re.search(r"running (\w+) node\. Name:'([^']*)'", str(exc))
    if found:
        return f"fails at node {found.group(2)!r} ({found.group(1)})"
    return f"fails ({first_line(exc)[:200]})"


def scaled_outputs(
    declared: list[TensorSpec],
    outputs: list[Shapes],
    sizes: list[Shapes],
    freed: dict[str, dict[int, str]],
) -> dict[str, dict[int, str]]:
    """The declared-number output dims that moved, each with its name; PassFailed for one that
    moved but follows no set of freed dims (module docstring, step 2)."""
    ratios = _ratios(sizes, freed)
    moved: dict[str, dict[int, str]] = {}
    for spec in declared:
        shapes = [run[spec.name] for run in outputs]
        if len({len(shape) for shape in shapes}) > 1:
            raise _not_scaling(spec.name, None, shapes, sizes)
        for axis, dim in enumerate(spec.shape):
            values = [shape[axis] for shape in shapes]
            if not isinstance(dim, int) or len(set(values)) == 1:
                continue
            if not _follows(values, ratios):
                raise _not_scaling(spec.name, axis, shapes, sizes)
            moved.setdefault(spec.name, {})[axis] = _name(spec.name, axis, values, sizes, freed)
    return moved


def _ratios(sizes: list[Shapes], freed: dict[str, dict[int, str]]) -> list[tuple[float, ...]]:
    """Per freed dim, its size in each run over its declared size (at most MAX_DIMS of them)."""
    return [
        tuple(run[name][axis] / sizes[0][name][axis] for run in sizes)
        for name, axes in freed.items()
        for axis in axes
    ][:MAX_DIMS]


def _follows(values: list[int], ratios: list[tuple[float, ...]]) -> bool:
    for count in range(1, len(ratios) + 1):
        for subset in itertools.combinations(ratios, count):
            scale = [math.prod(r[i] for r in subset) for i in range(len(values))]
            if all(
                abs(v - values[0] * s) <= SLACK * values[0] * s + 2
                for v, s in zip(values, scale, strict=True)
            ):
                return True
    return False


def _name(
    output: str, axis: int, values: list[int], sizes: list[Shapes], freed: dict[str, dict[int, str]]
) -> str:
    """The freed dim's name when the output dim is that dim in every run, else OUTPUT_AXIS."""
    for name, axes in freed.items():
        for input_axis, dim_name in axes.items():
            if all(run[name][input_axis] == v for run, v in zip(sizes, values, strict=True)):
                return dim_name
    return f"{output}_{axis}"


def _not_scaling(
    output: str, axis: int | None, shapes: list[list[int]], sizes: list[Shapes]
) -> PassFailed:
    runs = ", ".join(
        f"{shape} at {_shapes_text(s)}" for shape, s in zip(shapes, sizes, strict=True)
    )
    what = f"dim {axis} of output {output!r}" if axis is not None else f"output {output!r}'s rank"
    return PassFailed(f"The dims cannot be freed: {what} does not follow them ({runs}).", hint=HINT)


def _batch_rows(
    rewritten: Path,
    specs: list[TensorSpec],
    declared: Shapes,
    freed: dict[str, dict[int, str]],
    dims: dict[str, int] | None,
) -> str:
    """Step 3 of the module docstring, on three samples at batch 1; '' without a freed batch."""
    batched = [name for name, axes in freed.items() if axes.get(0) == "batch"]
    if not batched:
        return ""
    at_one = {
        name: [1, *shape[1:]] if name in batched else shape for name, shape in declared.items()
    }
    samples = [_feeds(specs, at_one, dims, seed) for seed in range(3)]
    try:
        rows = check_free_batch(rewritten, rewritten, samples, batched)
        return (
            f"batch {rows.batch} gives row for row what {rows.batch} runs at batch 1 give "
            f"(max |difference| {rows.max_abs_error:.2g})"
        )
    except PassFailed as exc:
        raise PassFailed(
            f"The dims cannot be freed: with its batch free the graph mixes samples ({exc.message}).",
            hint=HINT,
        ) from exc


def _feeds(
    specs: list[TensorSpec], shapes: Shapes, dims: dict[str, int] | None, seed: int = 0
) -> dict[str, np.ndarray]:
    return synthesize_inputs(specs, batch_size=1, dims=dims, overrides=shapes, seed=seed)[0]


def _difference(name: str, got: np.ndarray, expected: np.ndarray) -> float:
    if got.shape != expected.shape:
        raise PassFailed(
            f"The dims cannot be freed: at the declared sizes output {name!r} is "
            f"{list(got.shape)}, not the file's {list(expected.shape)}.",
            hint=HINT,
        )
    if not np.issubdtype(expected.dtype, np.floating):
        if not np.array_equal(got, expected):
            raise _differs(name, "its values differ")
        return 0.0
    error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    if not np.all(error <= RTOL * np.abs(expected) + ATOL * max(scale, 1e-30)):
        raise _differs(name, f"max |difference| {float(error.max()):.3g} ({TOLERANCE})")
    return float(error.max()) if error.size else 0.0


def _differs(name: str, how: str) -> PassFailed:
    return PassFailed(
        f"The dims cannot be freed: at the declared sizes output {name!r} differs from the "
        f"file's: {how}.",
        hint=HINT,
    )


def _shapes_text(shapes: Shapes) -> str:
    return ", ".join("x".join(map(str, shape)) for shape in shapes.values())
