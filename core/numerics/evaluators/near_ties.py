"""Ties and near-ties in the original's own outputs: where a flip says little, or nothing.

A variant that picks another class, reads another character or marks another pixel has changed
what the model says, unless the original itself all but split the decision. With p the
original's probabilities (a row's own values when they lie in [0, 1], else their softmax over
the scores' axis, or the sigmoid of a single logit):

- over classes (a top-1 pick, a CTC step): gap = p(top class) - p(second class); a flip where
  gap < NEAR_TIE (0.1) is a near-tie: by the original's own probabilities it moves the chance of
  a right answer by less than 0.1;
- at a threshold t (a sigmoid map, a binary or multi-label decision): a flip where
  |p - t| < THRESHOLD_MARGIN (0.05) is a near-tie, the same rule (for a binary decision at 0.5
  the gap between the two classes is 2 |p - 0.5|).

An exact tie (gap <= EXACT_TIE, or p within EXACT_TIE of t) leaves the decision to rounding: when
the original ties on most of what a task reads (`void_by_ties`), its metrics say nothing
(every variant "agrees" with a tie), and the numbers judge instead.
"""

from __future__ import annotations

import numpy as np

NEAR_TIE = 0.1
"""A decision over classes is a near-tie when the original's top two are closer than this."""
THRESHOLD_MARGIN = 0.05
"""A decision at a threshold is a near-tie when the original's probability is this close to it."""
EXACT_TIE = 1e-6


def probabilities(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """The scores as probabilities over `axis`: as they are when they lie in [0, 1], else their
    softmax (logits, log-probabilities). Non-finite values are read as 0."""
    values = np.nan_to_num(scores.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    if not values.size or (values.min() >= 0 and values.max() <= 1):
        return values
    values = np.exp(values - values.max(axis=axis, keepdims=True))
    return values / values.sum(axis=axis, keepdims=True)


def top_two_gaps(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """Per position along the other axes: the original's top probability minus its second
    (`probabilities`); 1 where the scores hold NaN or Inf (never a tie) or a single class."""
    moved = np.moveaxis(scores, axis, -1)
    if moved.shape[-1] < 2:
        return np.ones(moved.shape[:-1])
    finite = np.isfinite(moved).all(axis=-1)
    values = probabilities(moved)
    top2 = -np.partition(-values, 1, axis=-1)[..., :2]
    return np.where(finite, top2[..., 0] - top2[..., 1], 1.0)


def void_by_ties(tied: int, total: int, what: str) -> str:
    """Why a task's metrics say nothing when the original ties on most of `total` decisions
    (`what`: 'samples', 'steps'...); '' when it does not."""
    if total <= 0 or tied * 2 <= total:
        return ""
    return (
        f"the original's own top two are equal on {tied} of {total} {what}, so every variant "
        "'agrees' with it there and the task's metrics say nothing"
    )
