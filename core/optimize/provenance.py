"""Where a variant's samples came from, and what the run says and decides about it.

A run judges and calibrates on the user's data when given. Without it (optistudio.core.optimize.
no_data), on built-in samples where every input has a set, else on random inputs:

- built-in samples (real photographs, text, speech-like audio... made on the fly; the run's data
  line names each input's set): every variant is marked
  "judged on built-in samples, not your data", an INT8 one "calibrated and judged". Auto may
  choose such a variant when its task's check on them passes (a task was recognized or set);
  one calibrated on them and judged by output cosine and top-1 alone (no task) is left out
  unless the run is speed-only: nothing the task cares for was checked.
- random inputs: an INT8 variant calibrated on them has ranges from noise; Auto leaves it
  unless the run is speed-only. Its accuracy only means agreement on noise.

Both marks ride on the variant's budget note (the CLI's and the page's budget column) and its
own fields (`calibrated_on_random`, `builtin_samples`), and the notes say what to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from optistudio.core.data.source import CalibrationSource
from optistudio.core.optimize.variant import VariantResult

Origin = Literal["user", "builtin", "random"]
DATA_LABELS = {
    "user": "your data",
    "builtin": "built-in samples, not your data",
    "synthetic": "random inputs, not your data",
}
"""An accuracy report's `data` as every page, report and export names it: only the user's own
samples are 'your data'."""
RANDOM_SUFFIX = "; calibrated on random inputs: Auto leaves it (give data)"
"""What the run appends to the budget note of a variant calibrated on random inputs."""
RANDOM_REASON = "calibrated on random inputs; give data to confirm"
UNCHECKED_REASON = "calibrated on built-in samples with no task to check it; give data to confirm"
GIVE_DATA = (
    "give your own to confirm: --calib FILE on the command line (an .npz of inputs, or a "
    "folder or .zip of images with --image-* preprocessing), or 'Calibration / accuracy data' "
    "on the Optimize page"
)


def origin(source: CalibrationSource) -> Origin:
    """Where a source's samples come from: the user, the built-in sets, or random inputs."""
    if getattr(source, "synthetic", False):
        return "random"
    return "builtin" if getattr(source, "builtin", False) else "user"


def mark(
    variant: VariantResult,
    judged: CalibrationSource,
    calibration: CalibrationSource,
    *,
    calibrates: bool,
) -> None:
    """Set what the variant was calibrated and judged on (`calibrates`: a pass of its recipe
    needs calibration data)."""
    variant.calibrated_on_random = calibrates and origin(calibration) == "random"
    if origin(judged) == "builtin":
        builtin_calibration = calibrates and origin(calibration) == "builtin"
        variant.builtin_samples = "calibrated and judged" if builtin_calibration else "judged"


def data_label(data: str | None) -> str:
    """'your data', 'built-in samples, not your data' or 'random inputs, not your data' for an
    accuracy report's `data`; 'no accuracy report' for None."""
    if data is None:
        return "no accuracy report"
    return DATA_LABELS.get(data, f"{data} samples")


def samples_label(variant: VariantResult) -> str:
    """What the variant was calibrated and judged on, for its row on every page: 'your data'
    only when its accuracy was judged on the user's samples; 'calibrated and judged on built-in
    samples, not your data', 'judged on random inputs, not your data', or 'not judged' (a
    failed variant)."""
    if variant.builtin_samples:
        return variant.samples_note()
    judged = variant.accuracy.data if variant.accuracy else None
    if judged == "synthetic" or (judged is None and variant.calibrated_on_random):
        both = "calibrated and judged" if variant.calibrated_on_random else "judged"
        return f"{both} on random inputs, not your data"
    if variant.calibrated_on_random:
        return f"calibrated on random inputs, judged on {data_label(judged)}"
    if judged is None:
        return "not judged"
    return data_label(judged)


def judged_on_random(variants: Sequence[VariantResult]) -> bool:
    """Whether any variant was judged (or calibrated) on random inputs."""
    return any(
        v.calibrated_on_random or (v.accuracy is not None and v.accuracy.data == "synthetic")
        for v in variants
    )


def budget_suffix(variant: VariantResult, *, speed_only: bool) -> str:
    """What the run appends to a variant's budget note about its samples ('' for the user's)."""
    if variant.calibrated_on_random and not speed_only:
        return RANDOM_SUFFIX
    if variant.unchecked_builtin and not speed_only:
        return f"; {variant.samples_note()}, no task to check it: Auto leaves it (give data)"
    note = variant.samples_note()
    return f"; {note}" if note else ""


def plain_note(variant: VariantResult) -> str:
    """The budget note without what `budget_suffix` appended."""
    note = variant.budget_note
    for speed_only in (False, True):
        suffix = budget_suffix(variant, speed_only=speed_only)
        if suffix and note.endswith(suffix):
            return note.removesuffix(suffix)
    return note.removesuffix(RANDOM_SUFFIX)


def left_for_data(variant: VariantResult, *, speed_only: bool) -> bool:
    """Whether Auto passes over the variant until the user gives data (module docstring)."""
    return not speed_only and (variant.calibrated_on_random or variant.unchecked_builtin)


def why_for_data(variant: VariantResult) -> str | None:
    """The headline's reason for a variant `left_for_data`, else None."""
    if variant.calibrated_on_random:
        return RANDOM_REASON
    return UNCHECKED_REASON if variant.unchecked_builtin else None


def data_notes(
    variants: Sequence[VariantResult], *, speed_only: bool, chosen: str | None, why_random: str
) -> list[str]:
    """The run's notes about its samples: what the built-in samples were used for and whether
    Auto chose a variant calibrated on them; what random calibration means."""
    return _builtin_note(variants, chosen) + _random_notes(variants, speed_only, why_random)


def _builtin_note(variants: Sequence[VariantResult], chosen: str | None) -> list[str]:
    made = [v for v in variants if v.status == "made" and v.builtin_samples]
    if not made:
        return []
    calibrated = [v.recipe.label for v in made if v.builtin_samples == "calibrated and judged"]
    pick = next((v for v in made if v.recipe.name == chosen), None)
    lines = [
        "Built-in samples, not your data: with no data given, every variant was judged on real "
        "photographs, rendered text, sentences, speech-like audio or file bytes made on the fly"
    ]
    if calibrated:
        lines.append(f"INT8 calibrated on other built-in samples: {', '.join(calibrated)}")
    if pick is not None and pick.builtin_samples == "calibrated and judged":
        lines.append(
            f"Auto chose {pick.recipe.label}, calibrated and judged on them, as its task "
            "check passed on them"
        )
    return ["; ".join(lines) + f". They stand in for your data; {GIVE_DATA}."]


def _random_notes(
    variants: Sequence[VariantResult], speed_only: bool, why_random: str
) -> list[str]:
    names = [v.recipe.label for v in variants if v.calibrated_on_random and v.status == "made"]
    if not names:
        return []
    left = (
        "the run is speed-only, so Auto may still choose them"
        if speed_only
        else ("Auto does not choose them")
    )
    why = f" (no built-in samples: {why_random})" if why_random else ""
    return [
        f"Calibrated on random inputs (no data given{why}): {', '.join(names)}; {left}. Their "
        "INT8 ranges come from noise, not your inputs: give data (an .npz of inputs, or a "
        "folder or .zip of images with their preprocessing, and labels if you have them)."
    ]
