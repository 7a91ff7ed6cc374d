"""How closely one output matches its reference, in one call: errors and per-sample cosines of
a single pair of arrays (the cross-check's reading; `accuracy` keeps running sums instead)."""

from __future__ import annotations

import numpy as np

from optistudio.core.errors import OutputsDiffer
from optistudio.core.numerics.numeric_floor import cosines as numeric_cosines


def _check_same_outputs(reference: list[np.ndarray], candidate: list[np.ndarray]) -> None:
    ref_shapes = [list(array.shape) for array in reference]
    cand_shapes = [list(array.shape) for array in candidate]
    if ref_shapes != cand_shapes:
        raise OutputsDiffer(
            f"The outputs differ in shape: reference {ref_shapes}, candidate {cand_shapes}; "
            "they cannot be compared value by value.",
            hint="The two runs compute different things: check the backend or the variant.",
        )


def _per_sample(output: np.ndarray) -> np.ndarray:
    """[samples, features] float64 view of an output (a scalar output is one sample)."""
    rows = output.shape[0] if output.ndim else 1
    return output.astype(np.float64).reshape(rows, -1)


def output_agreement(reference: np.ndarray, candidate: np.ndarray) -> dict[str, float | bool]:
    """How closely one output matches its reference: max abs error, error relative to the
    reference's largest magnitude, worst and mean per-sample cosine, and NaN/Inf in it."""
    _check_same_outputs([reference], [candidate])
    ref, cand = _per_sample(reference), _per_sample(candidate)
    nan_inf = bool((~np.isfinite(cand)).any())
    finite = np.isfinite(ref) & np.isfinite(cand)
    error = np.abs(ref - cand)[finite]
    max_abs = float(error.max()) if error.size else 0.0
    scale = float(np.abs(ref[np.isfinite(ref)]).max()) if np.isfinite(ref).any() else 0.0
    cosines = numeric_cosines(ref, cand)
    return {
        "max_abs_error": max_abs,
        "max_rel_error": max_abs / scale if scale else max_abs,
        "cosine_min": float(cosines.min()) if cosines.size else 1.0,
        "cosine_mean": float(cosines.mean()) if cosines.size else 1.0,
        "nan_inf": nan_inf,
    }
