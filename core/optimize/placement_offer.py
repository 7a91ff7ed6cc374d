"""Whether Auto adds int8_placed (INT8 only where it pays) after its other variants.

Full static INT8 on ONNX Runtime can lose to FP32 as a whole while winning on its heavy layers:
the Q/DQ conversions, layout changes and INT8 kernels slower than their FP32 twins (Add,
pooling, small MatMuls) eat the gain. Auto then tries int8_placed, which keeps INT8 only on the
nodes where it was faster (optistudio.core.passes.int8_placed), and times that variant too.

The rule reads the variants already made: at least one ONNX Runtime static INT8 variant was
made, judged and timed, and none of them is both within the accuracy budget and faster than
the original. A static INT8 variant that failed or does not apply to this graph says nothing
(the placed one would quantize the same way); one that is faster within budget needs no
placement, even when Auto leaves it for its data's sake.
"""

from __future__ import annotations

from collections.abc import Sequence

from optistudio.core.measure.compare import FASTER
from optistudio.core.optimize.recipes import REFERENCE_BACKEND
from optistudio.core.optimize.variant import VariantResult

PLACEMENT_RECIPE = "int8_placed"
STATIC_INT8_PASS = "int8_static"


def offer_int8_placement(variants: Sequence[VariantResult]) -> bool:
    """True when an ONNX Runtime static INT8 variant was measured and every one measured is
    slower, not significantly faster, or out of budget; False once int8_placed is among them."""
    if any(_recipe_name(v) == PLACEMENT_RECIPE for v in variants):
        return False
    measured = [v for v in variants if _ort_static_int8(v) and v.judged]
    return bool(measured) and not any(_pays(v) for v in measured)


def _ort_static_int8(variant: VariantResult) -> bool:
    steps = [step.step for step in variant.recipe.steps]
    return variant.backend == REFERENCE_BACKEND and STATIC_INT8_PASS in steps


def _pays(variant: VariantResult) -> bool:
    return variant.within_budget and variant.verdict == FASTER


def _recipe_name(variant: VariantResult) -> str:
    return variant.recipe.name.split("@", 1)[0]
