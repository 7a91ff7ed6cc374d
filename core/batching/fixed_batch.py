"""A model whose batch is fixed at 1 is batched through a checked rewrite with a free batch.

Most real exports declare their batch as 1 (`optistudio.core.passes.dynamic_batch`). The
batching jobs (profile, verify) and the video scenario call `batchable` first: for such a model
it makes the rewrite, checks it at batch 3 against three runs at batch 1 on the job's own
request inputs (`optistudio.core.passes.batch_check`), and hands back its path with one line
saying so; for any other model the model itself. A rewrite is kept under the system's temporary
folder by the original's digest, so the next job on the same file reuses it. A graph that mixes
the batch is refused with the node or output named, and the batching does not apply.

A recurrent state declared at batch 1 on its batch axis (GRU/LSTM initial_h [directions,
1, hidden] beside an open batch on the audio: `optistudio.core.passes.state_batch`) is freed
the same way: the state's axis named like the model's batch, checked at batch 1 against the
original and at batch 3 row for row; refused with the state's axis named.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from optistudio.core.batching.applicability import stacking_problem
from optistudio.core.batching.freeing import batch_freeing
from optistudio.core.data.batch import batch_axes_of
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec, PassFailed
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.batch_check import BatchCheck, check_free_batch
from optistudio.core.passes.dynamic_batch import BATCH_DIM as BATCH_NAME
from optistudio.core.passes.dynamic_batch import free_batch
from optistudio.core.passes.state_batch import (
    StateInput,
    check_state_batch,
    free_batch_beside_states,
    free_state_batch,
    model_batch_name,
)

CHECK_BATCH = 3
"""The batch a rewrite is checked at, against that many runs at batch 1."""
CACHE_FOLDER = "optistudio-free-batch"
FIXED_BATCH_NOTE = (
    "This model's batch is fixed at 1. The batching and video jobs batch a rewrite of it with "
    "a free batch, checked first at batch 3 against three runs at batch 1; a graph that mixes "
    "the samples of a batch is refused, with the node named."
)


class BatchRefused(InvalidSpec):
    """The batch is fixed at 1 and its rewrite with a free batch was refused: the model is
    served at max batch 1 only (more instances are what can help)."""


@dataclass(frozen=True)
class Batchable:
    """The model to batch, and the line that says it is a rewrite ('' for the model itself)."""

    path: Path
    note: str = ""


def batchable(
    model_path: Path,
    inputs: ModelInputs | None = None,
    *,
    info: ModelInfo | None = None,
    cache: Path | None = None,
) -> Batchable:
    """`model_path` itself, or for a batch fixed at 1 (and no batch axis moved), its checked
    rewrite. Raises BatchRefused (an InvalidSpec) when the batch cannot be freed, saying why:
    such a model is still served at max batch 1 (`Pipeline.load` takes it as it is there).
    `info` is the model's card when the caller has read it (its requests are made from it)."""
    inputs = inputs or ModelInputs()
    model = onnx.load(str(model_path), load_external_data=False)
    freeing = batch_freeing(model.graph, inputs.batch_axes)  # the rule the page reads too
    if not freeing.needed:
        return Batchable(model_path)  # nothing declared at 1, or the user placed the batch
    folder = cache or Path(tempfile.gettempdir()) / CACHE_FOLDER
    digest = hashlib.sha256(model_path.read_bytes()).hexdigest()[:32]
    target, sidecar = folder / f"{digest}.onnx", folder / f"{digest}.json"
    if target.exists() and sidecar.exists():
        return Batchable(target, json.loads(sidecar.read_text())["note"])
    folder.mkdir(parents=True, exist_ok=True)
    if freeing.states:
        note, edits = free_states(model_path, target, inputs, list(freeing.states))
    else:
        note, edits = _free_fixed_batch(model_path, target, inputs, info)
    sidecar.write_text(json.dumps({"note": note, "edits": edits}))
    return Batchable(target, note)


def _free_fixed_batch(
    model_path: Path, target: Path, inputs: ModelInputs, info: ModelInfo | None = None
) -> tuple[str, list[str]]:
    """The checked rewrite of a batch fixed at 1, saved at `target`: its note and edits."""
    try:
        rewrite = free_batch(onnx.load(str(model_path)))
        onnx.save(rewrite.model, str(target))
        requests = check_requests(model_path, inputs, info)
        check = check_free_batch(model_path, target, requests, rewrite.inputs)
        declare_outputs(target, check)
    except PassFailed as exc:
        target.unlink(missing_ok=True)
        raise BatchRefused(
            f"Dynamic batching does not apply to this model: its batch is fixed at 1. "
            f"{exc.message}",
            hint="Serve it at batch 1 with several instances, or export it again with a "
            "dynamic batch axis.",
        ) from exc
    nodes = sum(edit.startswith("node ") for edit in rewrite.edits)
    note = (
        f"The model's batch is fixed at 1: batched a rewrite with a free batch ({nodes} "
        f"node(s) that pinned it edited; {check.line()})."
    )
    return note, rewrite.edits


def free_states(
    model_path: Path, target: Path, inputs: ModelInputs, states: list[StateInput]
) -> tuple[str, list[str]]:
    """The checked rewrite of recurrent states whose batch axis is declared at 1 (and of a
    batch fixed at 1 beside them), saved at `target`: its note and edits. BatchRefused names
    each state's batch axis and what the check found."""
    model = onnx.load(str(model_path))
    try:
        model, edits = free_batch_beside_states(model, states)
        name = model_batch_name(model.graph, BATCH_NAME)
        rewrite = free_state_batch(model, name)
        onnx.save(rewrite.model, str(target))
        stacked = _stacked_axes(target)
        requests = check_requests(target, inputs)  # the state batched on its axis: 1 row
        check = check_state_batch(model_path, target, requests, stacked)
        declare_outputs(target, check, name)
    except PassFailed as exc:
        target.unlink(missing_ok=True)
        said = "; ".join(state.sentence() for state in states)
        raise BatchRefused(
            f"Dynamic batching does not apply to this model: {said}, declared at 1. {exc.message}",
            hint="Serve it at batch 1 with several instances, or export it again with the "
            "state's batch axis dynamic.",
        ) from exc
    axes = ", ".join(f"{state.name!r} on axis {state.axis}" for state in states)
    note = (
        f"The model's recurrent state is declared at batch 1 ({axes}): batched a rewrite with "
        f"that axis free, checked first: the original's values at batch 1, and {check.line()}."
    )
    return note, [*edits, *rewrite.edits]


def _stacked_axes(path: Path) -> dict[str, int]:
    """Each input of the rewrite with a free batch axis, and that axis."""
    specs = inspect_model(path).inputs
    axes = batch_axes_of(specs)
    by_name = {spec.name: spec for spec in specs}
    return {
        name: axis
        for name, axis in axes.items()
        if axis is not None and isinstance(by_name[name].shape[axis], str)
    }


def check_requests(
    model_path: Path, inputs: ModelInputs, info: ModelInfo | None = None
) -> list[dict[str, np.ndarray]]:
    """The CHECK_BATCH requests of one row a rewrite is checked on: the job's own inputs
    (`info`: the card of `model_path`, when already read)."""
    info = info or inspect_model(model_path)
    arrays = inputs.arrays(info.inputs)
    return [
        inputs.requests(info.inputs, 1, arrays=arrays, seed=seed) for seed in range(CHECK_BATCH)
    ]


def fixed_at_one(info: ModelInfo, batch_axes: dict[str, int | None] | None = None) -> bool:
    """True when requests could stack but for a batch declared as 1 (on the inputs, and on
    outputs too): what `batchable` frees. A batch axis the user moved is taken as told."""
    if batch_axes or stacking_problem(info, batch_axes) is None:
        return False
    if not any(_at_one(spec) for spec in info.inputs):
        return False
    freed = info.model_copy(
        update={
            "inputs": [_freed(spec) for spec in info.inputs],
            "outputs": [_freed(spec) for spec in info.outputs],
        }
    )
    return stacking_problem(freed) is None


def _at_one(spec: TensorSpec) -> bool:
    return bool(spec.shape) and spec.shape[0] == 1


def _freed(spec: TensorSpec) -> TensorSpec:
    if not _at_one(spec):
        return spec
    return spec.model_copy(update={"shape": [BATCH_NAME, *spec.shape[1:]]})


def declare_outputs(path: Path, check: BatchCheck, batch_name: str = BATCH_NAME) -> None:
    """Declare each output with the rank the runs returned, its batch axis named: a recognizer that
    declares [1, seqlen] and returns [T, 1, C] is split back on axis 1, not 0."""
    model = onnx.load(str(path))
    for value in model.graph.output:
        shape = check.shapes.get(value.name)
        if shape is None:
            continue
        dims = value.type.tensor_type.shape.dim
        del dims[:]
        for index in range(len(shape)):  # the other dims left free: they may follow the input
            dim = dims.add()
            if index == check.axes[value.name]:
                dim.dim_param = batch_name
    onnx.save(model, str(path))
