"""The check a freed batch must pass: the rewrite at batch N gives, row for row, what N runs of
the original at batch 1 give (`optistudio.core.passes.dynamic_batch`).

Floating outputs agree within `RTOL` of each value plus `ATOL` of the output's largest
magnitude (kernels may block a batch of N differently from a batch of 1); integer and boolean
outputs agree exactly. Each output's batch axis is read from the two runs (`batch_axis`: dim 0,
or dim 1 of a time-major recognizer's [T, N, C]); an output with no such axis (the samples
merged into one, [1, 2A, 6] instead of [2, A, 6]) fails the check.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from optistudio.core.backends.reference import reference_session
from optistudio.core.errors import PassFailed, first_line

RTOL, ATOL = 1e-4, 1e-5
TOLERANCE = f"|batch N - batch 1| <= {RTOL:g} x |value| + {ATOL:g} x the output's largest |value|"


@dataclass(frozen=True)
class BatchCheck:
    """What the check ran and found."""

    batch: int
    max_abs_error: float
    tolerance: str = TOLERANCE
    axes: dict[str, int] = field(default_factory=dict)
    """Each output's batch axis as the runs showed it (1 for a time-major [T, N, C])."""
    shapes: dict[str, list[int]] = field(default_factory=dict)
    """Each output's shape at batch 1, as returned (declarations can disagree)."""

    def line(self) -> str:
        return (
            f"batch {self.batch} matches {self.batch} runs at batch 1 "
            f"(max |difference| {self.max_abs_error:.2g}; {self.tolerance})"
        )


def check_free_batch(
    original: Path,
    rewritten: Path,
    samples: list[dict[str, np.ndarray]],
    batch_inputs: list[str],
    *,
    input_axes: Mapping[str, int] | None = None,
) -> BatchCheck:
    """Run `samples` (batch-1 feeds) one by one on `original` and stacked on `rewritten`.

    `batch_inputs` are stacked on dim 0, or on their axis in `input_axes` (a recurrent state's
    axis 1); every other input takes the first sample's value.
    PassFailed names the output that differs, or the run that failed."""
    if len(samples) < 2:
        raise ValueError("the check needs at least two samples")
    shared = {k: v for k, v in samples[0].items() if k not in batch_inputs}
    singles = [run_outputs(original, {**sample, **shared}, "the original") for sample in samples]
    stacked = {
        name: np.concatenate([s[name] for s in samples], axis=(input_axes or {}).get(name, 0))
        for name in batch_inputs
    }
    batched = run_outputs(rewritten, {**stacked, **shared}, f"the rewrite at batch {len(samples)}")
    worst, axes, shapes = 0.0, {}, {}
    for name, together in batched.items():
        rows = [single[name] for single in singles]
        error, axes[name] = _compare(name, together, rows)
        worst, shapes[name] = max(worst, error), list(rows[0].shape)
    return BatchCheck(batch=len(samples), max_abs_error=worst, axes=axes, shapes=shapes)


FREE_HINT = "Export the model again with a dynamic batch axis, or serve it at batch 1."


def run_outputs(
    model: Path,
    feeds: dict[str, np.ndarray],
    what: str,
    *,
    freeing: str = "The batch",
    hint: str = FREE_HINT,
) -> dict[str, np.ndarray]:
    """Every output of `model` on `feeds` by name; PassFailed naming `what` failed to run
    while `freeing` (the batch, a state's batch) was being freed."""
    try:
        session = reference_session(model, quiet=True)
        outputs = session.run(None, feeds)
    except Exception as exc:  # the runtime raises its own untyped errors
        raise PassFailed(
            f"{freeing} could not be freed: {what} failed to run ({first_line(exc)}).",
            hint=hint,
        ) from exc
    return {o.name: np.asarray(v) for o, v in zip(session.get_outputs(), outputs, strict=True)}


def _compare(name: str, together: np.ndarray, rows: list[np.ndarray]) -> tuple[float, int]:
    axis = batch_axis(rows[0].shape, together.shape, len(rows))
    if axis is None:
        raise PassFailed(
            f"The batch could not be freed: output {name!r} does not carry the batch on one "
            f"axis (batch 1 gives {list(rows[0].shape)}, batch {len(rows)} gives "
            f"{list(together.shape)}).",
            hint="Serve the model at batch 1 (several instances), or export it with a dynamic "
            "batch axis.",
        )
    expected = np.concatenate(rows, axis=axis)
    if not np.issubdtype(expected.dtype, np.floating):
        if not np.array_equal(together, expected):
            raise _differs(name, "its values differ")
        return 0.0, axis
    error = np.abs(together.astype(np.float64) - expected.astype(np.float64))
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    if not np.all(error <= RTOL * np.abs(expected) + ATOL * max(scale, 1e-30)):
        raise _differs(name, f"max |difference| {float(error.max()):.3g} ({TOLERANCE})")
    return (float(error.max()) if error.size else 0.0), axis


def batch_axis(single: tuple[int, ...], together: tuple[int, ...], count: int) -> int | None:
    """The axis that holds the batch in an output: 1 at batch 1 and `count` at batch `count`,
    every other axis alike (dim 0 for most models, 1 for time-major [T, N, C] recognizers)."""
    if len(single) != len(together):
        return None
    differ = [i for i, (a, b) in enumerate(zip(single, together, strict=True)) if a != b]
    if len(differ) == 1 and single[differ[0]] == 1 and together[differ[0]] == count:
        return differ[0]
    if not differ and count == 1:
        return 0
    return None


def _differs(name: str, how: str) -> PassFailed:
    return PassFailed(
        f"The batch could not be freed: at batch N output {name!r} is not N runs at batch 1: "
        f"{how}. The graph mixes the samples of a batch somewhere.",
        hint="Serve the model at batch 1 (several instances), or export it with a dynamic "
        "batch axis.",
    )
