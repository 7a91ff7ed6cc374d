"""Free the declared dims a graph does not need: the batch, a height and width, a length.

Exporters fix every dim they traced with: a face detector declares [10, 3, 32, 32] while its
package frees the four dims on load and feeds whole frames (1x3x480x640). This pass generalizes
the `dynamic_batch` rewrite to any declared dim:

- which dims: the ones a caller's shapes ask otherwise (`shapes`: 1x3x480x640 against
  10x3x32x32 frees dims 0, 2 and 3); with no shapes, every declared number the graph does not
  need, found by one run per dim with that dim alone moved (a channel a Conv's weight fixes is
  needed; a batch, a height, a width of a fully convolutional graph are not);
- how: `dims_rewrite` frees them in the inputs and outputs, derives the Reshape / Expand
  constants that pinned them, and drops the stored intermediate shapes;
- verified, never trusted: `dims_check` runs the rewrite at the declared sizes (equal to the
  file), at two other sizes (it runs; each output dim scales with the freed dims) and, with the
  batch freed, row for row.
A dim the graph needs is refused in one sentence that names it and the node that needs it (a
Flatten into a Gemm whose weight fixes H x W); the dims it does not need are named in the hint.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.inputs import DEFAULT_DYNAMIC_DIM, synthesize_inputs
from optistudio.core.errors import PassFailed
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.dims_check import DimsCheck, check_free_dims, failed_node, run_model
from optistudio.core.passes.dims_check import Shapes as Shapes
from optistudio.core.passes.dims_rewrite import (
    HINT,
    Axes,
    declared_shapes,
    finish_outputs,
    free_axes,
    output_shapes,
)

CACHE_FOLDER = "optistudio-free-dims"
NO_SIZE_LIMIT = 1 << 62


@dataclass
class FreedDims:
    """The freed model, its freed dims (input -> axis -> name), edits and the check."""

    model: onnx.ModelProto
    freed: dict[str, dict[int, str]]
    check: DimsCheck
    edits: list[str] = field(default_factory=list)

    def line(self) -> str:
        dims = "; ".join(
            f"{name} dims {', '.join(f'{a} ({n})' for a, n in axes.items())}"
            for name, axes in self.freed.items()
        )
        return f"freed {dims}: {self.check.line()}"


def fixed_axes(graph: onnx.GraphProto) -> Axes:
    """Each data input's axes declared as a number (the candidates to free)."""
    return {
        name: axes
        for name, dims in declared_shapes(graph).items()
        if (axes := [i for i, d in enumerate(dims) if isinstance(d, int) and d > 0])
    }


def conflicting_axes(graph: onnx.GraphProto, shapes: Mapping[str, list[int]]) -> Axes:
    """The axes where `shapes` ask another size than the number an input declares."""
    declared = declared_shapes(graph)
    found: Axes = {}
    for name, shape in shapes.items():
        dims = declared.get(name)
        if dims is None or len(dims) != len(shape):
            continue
        axes = [i for i, d in enumerate(dims) if isinstance(d, int) and d > 0 and d != shape[i]]
        if axes:
            found[name] = axes
    return found


def free_declared_dims(
    model_path: Path,
    out: Path,
    *,
    shapes: Mapping[str, list[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    batch_axes: Mapping[str, int | None] | None = None,
) -> FreedDims:
    """Free the dims `shapes` ask otherwise (none: every dim the graph does not need), check
    the rewrite, save it at `out`; PassFailed names a dim the graph needs, or what failed."""
    model = onnx.load(str(model_path))
    dims = dict(dims or {})
    axes_of = _batch_axes(model.graph, batch_axes or {})
    base = _declared_sizes(model.graph, dims)
    if shapes:
        axes = conflicting_axes(model.graph, shapes)
        if not axes:
            raise PassFailed(
                "No declared dim of this model differs from the shapes asked: there is "
                "nothing to free.",
                hint="Run it as it is.",
            )
        try:
            return _freed(model_path, out, model, axes, base, dict(shapes), dims, axes_of)
        except PassFailed as exc:
            refusal = _needed(model_path, out, model, axes, base, dict(shapes), dims, axes_of, exc)
            if refusal is exc:
                raise
            raise refusal from exc
    axes = _not_needed(model_path, out, model, base, dims, axes_of)
    return _freed(model_path, out, model, axes, base, None, dims, axes_of)


def _freed(
    model_path: Path,
    out: Path,
    model: onnx.ModelProto,
    axes: Axes,
    base: Shapes,
    target: Shapes | None,
    dims: dict[str, int],
    batch_axes: dict[str, int | None],
) -> FreedDims:
    rewrite = free_axes(model, axes, batch_axes, sizes=base)
    onnx.save(rewrite.model, str(out))
    sizes = run_sizes(base, axes, target, batch_axes)
    check = check_free_dims(model_path, out, sizes, rewrite.names, dims=dims)
    finish_outputs(rewrite.model, output_shapes(model.graph), check.moved)
    onnx.save(rewrite.model, str(out))
    return FreedDims(model=rewrite.model, freed=rewrite.names, check=check, edits=rewrite.edits)


def run_sizes(
    base: Shapes, axes: Axes, target: Shapes | None, batch_axes: Mapping[str, int | None]
) -> list[Shapes]:
    """The freed inputs' shapes of the check's three runs: declared, then the asked shapes (or
    the freed dims doubled), then the freed dims doubled (or tripled)."""

    def moved(step: int) -> Shapes:
        return {
            name: [
                _other(size, step, axis == batch_axes.get(name)) if axis in axes[name] else size
                for axis, size in enumerate(base[name])
            ]
            for name in axes
        }

    declared = {name: base[name] for name in axes}
    if target is None:
        return [declared, moved(1), moved(2)]
    asked = {
        name: [
            target[name][i] if name in target and i in axes[name] else size
            for i, size in enumerate(base[name])
        ]
        for name in axes
    }
    other = moved(1) if moved(1) != asked else moved(2)
    return [declared, asked, other]


def _other(size: int, step: int, batch: bool) -> int:
    """Another size for a dim: a batch 1, 2 or 3 (small, whatever it declares), else the
    declared size times 2 or 3 (a multiple keeps every stride of the graph whole)."""
    if batch:
        return [s for s in (1, 2, 3, 4) if s != size][step - 1]
    return size * (step + 1)


def _not_needed(
    model_path: Path,
    out: Path,
    model: onnx.ModelProto,
    base: Shapes,
    dims: dict[str, int],
    batch_axes: dict[str, int | None],
) -> Axes:
    """The declared dims whose move alone the graph runs with (one run each)."""
    free: Axes = {}
    needed: list[str] = []
    for name, axes in fixed_axes(model.graph).items():
        for axis in axes:
            reason = _probe(model_path, out, model, {name: [axis]}, base, None, dims, batch_axes)
            if reason is None:
                free.setdefault(name, []).append(axis)
            else:
                needed.append(reason)
    if not free:
        raise PassFailed(f"The graph needs every dim it declares: {'; '.join(needed)}.", hint=HINT)
    return free


def _needed(
    model_path: Path,
    out: Path,
    model: onnx.ModelProto,
    axes: Axes,
    base: Shapes,
    target: Shapes,
    dims: dict[str, int],
    batch_axes: dict[str, int | None],
    failure: PassFailed,
) -> PassFailed:
    """The refusal for shapes the graph cannot run at: the dims it needs, each with the node
    that needs it, and the ones that could be freed; `failure` when each alone would do."""
    needs: list[tuple[str, int, str | None]] = []
    frees: list[tuple[str, int, str | None]] = []
    for name, freed in axes.items():
        for axis in freed:
            one = {name: [axis]}
            reason = _probe(model_path, out, model, one, base, target, dims, batch_axes)
            (frees if reason is None else needs).append((name, axis, reason))
    if not needs:
        return failure
    for name, axis in _fixed_batches(model.graph, batch_axes, axes):  # the batch, if not asked
        if _probe(model_path, out, model, {name: [axis]}, base, None, dims, batch_axes) is None:
            frees.append((name, axis, None))
    name = needs[0][0]
    sizes = "x".join(str(base[n][a]) for n, a, _ in needs)
    which = ", ".join(str(a) for _, a, _ in needs)
    hint = HINT
    if frees:
        named = ", ".join(f"{n!r} dim {a}" for n, a, _ in frees)
        hint = (
            f"Dims the graph does not need can be freed ({named}): keep the declared {sizes} "
            f"and use --free-dims. {HINT}"
        )
    return PassFailed(
        f"Input {name!r} cannot run at {'x'.join(map(str, target[name]))}: its graph needs "
        f"{sizes} (dims {which}) as declared ({needs[0][2]}).",
        hint=hint,
    )


def _probe(
    model_path: Path,
    out: Path,
    model: onnx.ModelProto,
    axes: Axes,
    base: Shapes,
    target: Shapes | None,
    dims: dict[str, int],
    batch_axes: dict[str, int | None],
) -> str | None:
    """Why the graph needs `axes` (one dim) as declared, or None: it runs with it moved."""
    probe = out.with_name(f"{out.stem}.probe.onnx")
    moved = run_sizes(base, axes, target, batch_axes)[1]
    at = ", ".join("x".join(map(str, shape)) for shape in moved.values())
    try:
        onnx.save(free_axes(model, axes, batch_axes, sizes=base).model, str(probe))
        specs = inspect_model(probe, max_bytes=NO_SIZE_LIMIT).inputs
        feeds = synthesize_inputs(specs, batch_size=1, dims=dims, overrides=moved)[0]
        run_model(probe, feeds, "")
        return None
    except PassFailed as exc:
        if exc.__cause__ is not None:  # the run failed: the node the runtime names
            return f"node {failed_node(exc.__cause__).removeprefix('fails at node ')} fails at {at}"
        return exc.message.removeprefix("The dims cannot be freed: ").rstrip(".")
    finally:
        probe.unlink(missing_ok=True)


def _fixed_batches(
    graph: onnx.GraphProto, batch_axes: Mapping[str, int | None], asked: Axes
) -> list[tuple[str, int]]:
    """The inputs' batch axes declared as a number and not among `asked`."""
    return [
        (name, axis)
        for name, axes in fixed_axes(graph).items()
        if (axis := batch_axes.get(name)) is not None
        and axis in axes
        and axis not in asked.get(name, [])
    ]


def _batch_axes(graph: onnx.GraphProto, given: Mapping[str, int | None]) -> dict[str, int | None]:
    """Each input's batch axis: as given, else dim 0 of an input of rank 2 or more."""
    return {
        name: given[name] if name in given else (0 if len(dims) >= 2 else None)
        for name, dims in declared_shapes(graph).items()
    }


def _declared_sizes(graph: onnx.GraphProto, dims: Mapping[str, int]) -> Shapes:
    """Each input's full shape at its declared sizes, dynamic dims from `dims` (or 16)."""
    return {
        name: [
            d
            if isinstance(d, int) and d > 0
            else dims.get(
                f"{name}.{i}", dims.get(d, DEFAULT_DYNAMIC_DIM) if d else DEFAULT_DYNAMIC_DIM
            )
            for i, d in enumerate(declared)
        ]
        for name, declared in declared_shapes(graph).items()
    }


def freed_copy(
    model_path: Path,
    *,
    shapes: Mapping[str, list[int]] | None = None,
    dims: Mapping[str, int] | None = None,
    folder: Path | None = None,
) -> tuple[Path, str]:
    """The checked copy of `model_path` with its dims freed for `shapes` and the line saying
    so, kept under the system's temporary folder by the file's digest and the shapes asked (the
    next command on the same file and shapes reuses it)."""
    folder = folder or Path(tempfile.gettempdir()) / CACHE_FOLDER
    asked = json.dumps([dict(shapes or {}), dict(dims or {})], sort_keys=True)
    digest = hashlib.sha256(model_path.read_bytes() + asked.encode()).hexdigest()[:32]
    target, sidecar = folder / f"{digest}.onnx", folder / f"{digest}.json"
    if target.exists() and sidecar.exists():
        return target, json.loads(sidecar.read_text())["line"]
    folder.mkdir(parents=True, exist_ok=True)
    freed = free_declared_dims(model_path, target, shapes=shapes, dims=dims)
    sidecar.write_text(json.dumps({"line": freed.line()}))
    return target, freed.line()


# --- the pass ------------------------------------------------------------------------------


class FreeDimsConfig(BaseModel):
    """Options of the free-dims pass."""

    model_config = ConfigDict(extra="forbid")

    shapes: dict[str, list[int]] = Field(
        default_factory=dict,
        description="Shapes the model is to run at, by input: the declared dims they differ "
        "from are freed. Empty: every declared dim the graph does not need.",
    )
    dims: dict[str, int] = Field(
        default_factory=dict,
        description="Sizes of the model's dims that are already dynamic, for the check's runs.",
    )


def run_free_dims(
    model: Path, out: Path, config: FreeDimsConfig, context: PassContext
) -> PassReport:
    """Free the dims, check the rewrite against the file, and save it."""
    context.progress(0.1, "freeing the declared dims the graph does not need")
    freed = free_declared_dims(model, out, shapes=config.shapes, dims=config.dims)
    details = {
        "edits": freed.edits,
        "freed": {name: list(axes.values()) for name, axes in freed.freed.items()},
        "check": freed.check.line(),
    }
    return PassReport(output=out, details=details)


FREE_DIMS = PassInfo(
    name="free_dims",
    label="Free the declared dims",
    description="Free the fixed dims a graph does not need (batch, height, width, length): "
    "the declared inputs and outputs and the Reshape / Expand constants that pinned them, "
    "checked equal to the file at its declared sizes and run at two other sizes; a dim the "
    "graph needs is refused with the node named.",
    config="optistudio.core.passes.free_dims:FreeDimsConfig",
    implementation="optistudio.core.passes.free_dims:run_free_dims",
    changes_outputs=True,
)
