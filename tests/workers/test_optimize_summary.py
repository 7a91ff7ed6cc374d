"""The optimize job's one-line message counts what was not applicable apart from failures."""

from __future__ import annotations

import pytest

from optistudio.core.errors import ErrorCode, ErrorInfo
from optistudio.core.optimize.recipes import BUILTIN_RECIPES
from optistudio.core.optimize.run import OptimizeReport, OptimizeSpec, VariantResult
from optistudio.workers.optimize_job import summary


def unmade(name: str, status: str) -> VariantResult:
    variant = VariantResult(recipe=BUILTIN_RECIPES[name], precision="int8")
    error = ErrorInfo(code=ErrorCode.pass_failed, message=f"{name} did not apply.")
    variant.fail(error) if status == "failed" else variant.set_aside(error)
    return variant


def made(name: str) -> VariantResult:
    return VariantResult(recipe=BUILTIN_RECIPES[name], precision="fp32", path="m.onnx")


def report(variants: list[VariantResult]) -> OptimizeReport:
    return OptimizeReport(spec=OptimizeSpec(), data="random", variants=variants, chosen=None)


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        (
            [unmade("int8_dynamic", "not_applicable"), unmade("int8_static", "not_applicable")],
            "No variant could be made: 2 not applicable to this model or backend; see each "
            "one's reason.",
        ),
        (
            [unmade("int8_dynamic", "failed"), unmade("int8_static", "not_applicable")],
            "No variant could be made: 1 recipe(s) failed, 1 not applicable to this model or "
            "backend; see each one's reason.",
        ),
        (
            [unmade("int8_dynamic", "failed")],
            "No variant could be made: 1 recipe(s) failed; see each one's reason.",
        ),
    ],
    ids=["all-not-applicable", "failed-and-not-applicable", "failed"],
)
def test_no_variant_made_says_why_in_counts(variants: list[VariantResult], message: str) -> None:
    assert summary(report(variants)) == message


def test_made_variants_count_the_not_applicable_apart() -> None:
    variants = [made("fp32"), unmade("int8_dynamic", "not_applicable")]

    assert summary(report(variants)).startswith("Made 1 variant(s), 1 not applicable. ")
