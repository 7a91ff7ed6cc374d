"""The numeric floor every verdict keeps: how far each output of a variant strays from the
original's on its worst sample, whatever the task's metrics say.

A task metric reads what a model's outputs mean (the class picked, the string read, the boxes
found) and so can be fooled by outputs that mean nothing: over tied scores every variant "picks
the same class", over a constant output every variant "agrees". The floor reads the numbers.
For each float output o, with r_i and c_i the original's and the variant's values of sample i
(flattened, non-finite elements left out), over the n samples compared:

    signal_o   = (1 / n) sum_i |r_i|^2              (the original's mean energy per sample)
    noise_o    = max_i |r_i - c_i|^2                 (the worst sample's error energy)
    snr_o      = 10 log10(signal_o / noise_o)  dB    (worst-sample SNR; capped at +-MAX_DB)
    cosine_o   = min_i r_i . c_i / (|r_i| |c_i|)     (worst-sample cosine, shown beside it)

A variant passes the floor when snr_o >= the budget's floor (FLOOR_SNR_DB, 6 dB: no sample's
error energy above a quarter of the output's mean energy, about a worst cosine of 0.89) on
every floored output. The SNR measures against the output's mean energy, not the sample's own,
so a sample whose map is nearly all zero (an empty text-detection map, which INT8 rounds to
exact zeros) does not fail a variant that got every other sample right, while outputs of all
zeros (cosine 0), of another scale (x2: 0 dB) or of noise fail at once. No task metric
overrides it; a budget may move it (`AccuracyBudget.floor_snr_db`) or switch it off (None).

Not floored: integer outputs (class ids, labels: discrete, a near-tie flip is all the change
there is; the task judges them) and outputs the task reads as sets (boxes after the model's
own NMS, `TaskScore.floor_exempt`), whose rows may come in another order.

The same pass notes which outputs of the original are constant: the same values (within
CONSTANT_RTOL of the first sample's largest magnitude) for every sample, while the inputs
differ. A model all of whose outputs are constant makes every accuracy check void: the variants
are judged numerically and the run says so (`constant_notes`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

FLOOR_SNR_DB = 6.0
"""The default floor: worst-sample SNR of every float output, in dB."""
MAX_DB = 200.0
"""Where the SNR is capped (an exact variant has no noise), so it stores as JSON."""
CONSTANT_RTOL = 1e-6


class OutputFloor(BaseModel):
    """One output's numbers against the original's on the worst sample."""

    model_config = ConfigDict(extra="forbid")

    worst_snr_db: float | None = Field(
        description="10 log10(mean energy per sample / worst sample's error energy); None when "
        "the original's output is zero on every sample (nothing to scale by)."
    )
    worst_cosine: float = Field(description="The worst sample's cosine to the original's.")
    floored: bool = Field(
        default=True,
        description="Whether the floor judges this output (False: integers, or read as sets).",
    )
    constant: bool = Field(
        default=False, description="The original gave the same values for every sample."
    )
    samples: int = 0


class Sameness:
    """Whether every row seen equals the first one (within CONSTANT_RTOL of its scale)."""

    def __init__(self) -> None:
        self.first: np.ndarray | None = None
        self.same = True
        self.rows = 0

    def add(self, rows: np.ndarray) -> None:
        """A [rows, values] float matrix of one batch."""
        if not len(rows):
            return
        if self.first is None:
            self.first = rows[0].copy()
        if self.same:
            scale = float(np.nanmax(np.abs(self.first), initial=0.0))
            if rows.shape[1:] != self.first.shape:
                self.same = False
            else:
                apart = np.abs(rows - self.first[None, :])
                self.same = bool(np.nanmax(apart, initial=0.0) <= CONSTANT_RTOL * max(scale, 1e-30))
        self.rows += len(rows)

    @property
    def constant(self) -> bool:
        """Same on every row, and there were at least two."""
        return self.same and self.rows >= 2


class _OutputSums:
    """Running sums of one output for its floor."""

    def __init__(self, floored: bool) -> None:
        self.floored = floored
        self.signal = 0.0
        self.noise = 0.0
        self.cosine = 1.0
        self.rows = 0
        self.sameness = Sameness()

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        finite = np.isfinite(ref) & np.isfinite(cand)
        ref0, cand0 = np.where(finite, ref, 0.0), np.where(finite, cand, 0.0)
        self.signal += float(np.einsum("ij,ij->", ref0, ref0))
        error = ref0 - cand0
        per_row = np.einsum("ij,ij->i", error, error)
        self.noise = max(self.noise, float(per_row.max(initial=0.0)))
        self.cosine = min(self.cosine, float(cosines(ref, cand).min(initial=1.0)))
        self.rows += len(ref)
        self.sameness.add(ref)

    def floor(self) -> OutputFloor:
        return OutputFloor(
            worst_snr_db=snr_db(self.signal / max(self.rows, 1), self.noise),
            worst_cosine=self.cosine,
            floored=self.floored,
            constant=self.sameness.constant,
            samples=self.rows,
        )


class FloorTally:
    """Each output's floor sums, fed the per-sample views of both models' outputs."""

    def __init__(self) -> None:
        self.outputs: dict[str, _OutputSums] = {}
        self.inputs = Sameness()

    def add(self, name: str, ref: np.ndarray, cand: np.ndarray, *, floating: bool) -> None:
        """One batch of output `name` as [rows, values] float64 matrices of the same shape;
        `floating`: whether the original's output holds floats (integers are not floored)."""
        sums = self.outputs.setdefault(name, _OutputSums(floored=floating))
        sums.add(ref, cand)

    def add_inputs(self, rows: Sequence[np.ndarray]) -> None:
        """One batch of the inputs fed, each as [rows, values]: their sameness is kept."""
        if rows:
            self.inputs.add(np.hstack([np.asarray(row, np.float64) for row in rows]))

    def floors(self, exempt: Iterable[str] = ()) -> dict[str, OutputFloor]:
        """Every output's floor; those in `exempt` (read as sets by the task) not floored."""
        skipped = set(exempt)
        found = {name: sums.floor() for name, sums in self.outputs.items()}
        return {
            name: floor.model_copy(update={"floored": False}) if name in skipped else floor
            for name, floor in found.items()
        }

    def constant_outputs(self) -> list[str]:
        """The outputs the original gave the same values for on every sample, when the inputs
        differed; [] when they did not (a constant then says nothing about the model)."""
        if self.inputs.same:
            return []
        return [name for name, sums in self.outputs.items() if sums.sameness.constant]


def snr_db(signal: float, noise: float) -> float | None:
    """10 log10(signal / noise), capped at +-MAX_DB; None when there is no signal."""
    if noise <= 0:
        return MAX_DB
    if signal <= 0:
        return None
    return max(-MAX_DB, min(MAX_DB, 10.0 * math.log10(signal / noise)))


def cosines(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per row of two [rows, values] matrices: their cosine (1 when both rows are zero, 0 when
    only one is, 0 for a candidate row with NaN or Inf)."""
    broken = (~np.isfinite(candidate)).any(axis=1)
    finite = np.isfinite(reference) & np.isfinite(candidate)
    ref, cand = np.where(finite, reference, 0.0), np.where(finite, candidate, 0.0)
    ref_norm, cand_norm = np.linalg.norm(ref, axis=1), np.linalg.norm(cand, axis=1)
    dot = np.einsum("ij,ij->i", ref, cand)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.clip(dot / (ref_norm * cand_norm), -1.0, 1.0)
    both_zero = (ref_norm == 0) & (cand_norm == 0)
    values = np.where(both_zero, 1.0, np.where((ref_norm == 0) | (cand_norm == 0), 0.0, values))
    return np.where(broken, 0.0, values)


def check_floor(
    floors: Mapping[str, OutputFloor], limit_db: float | None, rule: str = ""
) -> tuple[list[str], list[str]]:
    """What the floor says of a report's outputs: (passes, failures), a sentence each; `rule`
    names the precision rule that set the limit ('the BF16 rule'), '' for the budget's own."""
    judged = {name: floor for name, floor in floors.items() if floor.floored}
    if limit_db is None or not judged:
        return [], []
    said = f"numeric floor ({rule})" if rule else "numeric floor"
    failures = [
        f"{said}: {name!r} worst-sample SNR {floor.worst_snr_db:.1f} dB < "
        f"{limit_db:g} dB (worst cosine {floor.worst_cosine:.4f}); no task metric overrides it"
        for name, floor in judged.items()
        if floor.worst_snr_db is not None and floor.worst_snr_db < limit_db
    ]
    if failures:
        return [], failures
    measured = {n: f for n, f in judged.items() if f.worst_snr_db is not None}
    if not measured:
        return ["numeric floor not measured (the original's outputs are zero)"], []
    name, lowest = min(measured.items(), key=lambda item: item[1].worst_snr_db or 0.0)
    return [
        f"{said}: worst-sample SNR >= {limit_db:g} dB on every output (lowest "
        f"{lowest.worst_snr_db:.1f} dB on {name!r})"
    ], []


def constant_warning(outputs: Sequence[str], samples: int) -> str:
    """The warning for a model whose outputs are the same for every input."""
    named = ", ".join(repr(name) for name in outputs)
    return (
        f"The model's outputs ({named}) are the same for every one of the {samples} inputs "
        "compared, which differ: every accuracy check compares constants and says nothing "
        "about the variants, which were judged numerically (do they reproduce the constant?). "
        "Check the model: a constant output usually means a broken export or weights."
    )


def all_constant(constant: Sequence[str], floors: Mapping[str, OutputFloor]) -> bool:
    """Whether every output compared is constant (a model, not one output, that never moves)."""
    return bool(constant) and set(constant) >= set(floors)
