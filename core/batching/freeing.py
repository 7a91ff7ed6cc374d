"""Which batch the batching jobs free before they batch a model, and whether requests stack then.

One rule for the jobs and for the page that offers them. A file often declares its batch where
requests cannot stack as it stands: at 1 on dim 0 (most exports), or, for a recurrent state
fed from a graph input, at 1 on the state's batch axis (AECMOS's h0 [4, 1, 64]: a GRU's
initial_h is [directions, batch, hidden], so read by its dims alone h0 has "a fixed first
dimension of 4"). `batch_freeing` reads from the graph what the jobs free
(`fixed_batch.batchable` makes that rewrite): the inputs whose dim 0 is declared 1
(`dynamic_batch.fixed_batch_inputs`) and the states declared at 1 on their batch axis
(`state_batch.fixed_state_inputs`); nothing when the user set the batch axes (taken as told).

`batching_problem` is why requests cannot stack on the model as the jobs will batch it (the
card with each freed dim named like the model's batch, `as_freed`), or None. None is an offer, not a
promise: the jobs check the rewrite on the job's own inputs (the original's values at batch 1,
batch 3 row for row) and refuse it then, naming the node or the state's axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from optistudio.core.batching.applicability import stacking_problem
from optistudio.core.data.batch import BatchAxes
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.core.passes.dynamic_batch import BATCH_DIM, fixed_batch_inputs
from optistudio.core.passes.state_batch import StateInput, fixed_state_inputs, model_batch_name


@dataclass(frozen=True)
class BatchFreeing:
    """What the batching jobs free: the inputs whose batch (dim 0) is declared 1, the states
    declared at 1 on their batch axis, and the name the freed dims take."""

    fixed: tuple[str, ...] = ()
    states: tuple[StateInput, ...] = ()
    batch_name: str = BATCH_DIM

    @property
    def needed(self) -> bool:
        return bool(self.fixed or self.states)

    def state_note(self) -> str:
        """The page's line for freed states ('' when there are none)."""
        if not self.states:
            return ""
        axes = ", ".join(f"{state.name!r} on axis {state.axis}" for state in self.states)
        return (
            f"This model's recurrent state is declared at batch 1 ({axes}). The batching jobs "
            "batch a rewrite with that axis free, checked first against the original at batch "
            "1 and at batch 3 row for row; a graph that mixes the batch is refused then."
        )


def batch_freeing(graph: onnx.GraphProto, batch_axes: BatchAxes | None = None) -> BatchFreeing:
    """What the jobs free in the model of `graph` (module docstring); nothing when the user
    set the batch axes."""
    if batch_axes:
        return BatchFreeing()
    states = tuple(fixed_state_inputs(graph))
    names = {state.name for state in states}
    fixed = tuple(name for name in fixed_batch_inputs(graph) if name not in names)
    return BatchFreeing(fixed, states, model_batch_name(graph, BATCH_DIM))


def card_freeing(info: ModelInfo, batch_axes: BatchAxes | None = None) -> BatchFreeing:
    """What the jobs free as far as the card shows it, when the graph is not at hand: the
    inputs whose dim 0 is declared 1 (a state's axis takes the graph: `batch_freeing`)."""
    if batch_axes:
        return BatchFreeing()
    return BatchFreeing(tuple(spec.name for spec in info.inputs if _at_one(spec.shape, 0)))


def batching_problem(
    info: ModelInfo, batch_axes: BatchAxes | None = None, freeing: BatchFreeing | None = None
) -> str | None:
    """Why requests cannot stack on the model as the batching jobs batch it, with `freeing`
    (`batch_freeing` of its graph; `card_freeing` when None), or None."""
    freeing = freeing if freeing is not None else card_freeing(info, batch_axes)
    if not freeing.needed:
        return stacking_problem(info, batch_axes)
    return stacking_problem(as_freed(info, freeing))


def as_freed(info: ModelInfo, freeing: BatchFreeing) -> ModelInfo:
    """The card as the jobs' rewrite declares it: each freed dim (dim 0 of the fixed inputs,
    the states' batch axis, dim 0 of the outputs declared 1) named like the model's batch."""
    axes = {name: 0 for name in freeing.fixed} | {s.name: s.axis for s in freeing.states}
    inputs = [_named(spec, axes.get(spec.name), freeing.batch_name) for spec in info.inputs]
    outputs = [
        _named(spec, 0 if _at_one(spec.shape, 0) else None, freeing.batch_name)
        for spec in info.outputs
    ]
    return info.model_copy(update={"inputs": inputs, "outputs": outputs})


def _named(spec: TensorSpec, axis: int | None, name: str) -> TensorSpec:
    if axis is None or not _at_one(spec.shape, axis):
        return spec
    shape = [*spec.shape[:axis], name, *spec.shape[axis + 1 :]]
    return spec.model_copy(update={"shape": shape})


def _at_one(shape: list[int | str | None], axis: int) -> bool:
    return len(shape) > axis and shape[axis] == 1
