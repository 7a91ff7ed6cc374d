"""What a pass that searches against the run's own judge is handed: the judged inputs and a
verdict on a candidate's outputs for them.

Auto judges every variant by running it beside the original on the run's samples (the user's,
or built-in ones) with the task's judge, the budget and the numeric floor
(optistudio.core.numerics.accuracy, budget). A pass that keeps searching until that judge
passes (int8_nncf_ov_ac) runs its candidates itself, in memory, and asks the same judge about
their outputs; the run then judges the file it keeps again, as every variant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

import numpy as np


class Verdict(NamedTuple):
    """The run's judgement of a candidate's outputs: within budget, its worst sample's cosine
    of the judged output, the budget's sentence (why it passes or what it missed), and each
    batch's cosine of the judged output (flattened), in the order of the batches given."""

    within: bool
    worst_cosine: float
    note: str
    cosines: tuple[float, ...] = ()


class VariantJudge(Protocol):
    """The run's judge: the batches it judges on, and its verdict on a candidate's outputs for
    them (by batch number, each output in the original's output order). The run's verdict is
    the one on every batch; one on a part of them judges agreement with the original only
    (labels, which count samples from the first batch, are left aside)."""

    def batches(self) -> Sequence[dict[str, np.ndarray]]: ...

    def verdict(self, outputs: Mapping[int, Sequence[np.ndarray]]) -> Verdict: ...
