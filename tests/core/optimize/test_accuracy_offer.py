"""Auto's rules for adding int8_nncf_ov_careful, then int8_nncf_ov_ac
(optistudio.core.optimize.accuracy_offer), and the step that adds them
(optistudio.core.optimize.run._add_accuracy_control) on a model whose plain NNCF INT8 breaks the
judge (tests.core.passes.test_nncf_accuracy): its outliers break the careful calibration too, so
the accuracy control follows."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.measure.compare import FASTER, NO_DIFFERENCE, SLOWER, ComparisonSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.accuracy_offer import (
    FRONT_END_LABEL,
    as_offered,
    offer_accuracy_control,
    offer_careful_calibration,
)
from optistudio.core.optimize.recipes import (
    BUILTIN_RECIPES,
    CAREFUL_CALIBRATION,
    RecipeStep,
    get_recipe,
    on_backend,
)
from optistudio.core.optimize.run import Judging, Making, OptimizeSpec, _add_accuracy_control
from optistudio.core.optimize.spec import UnsteadyTiming
from optistudio.core.optimize.variant import StepReport, VariantResult
from optistudio.core.progress import ignore_progress
from tests.core.optimize.test_placement_offer import judged, unmade
from tests.core.passes.test_nncf_accuracy import Outliers, build_outlier_model

OV = "openvino"


def _ov(name: str, verdict: str, *, within: bool = True) -> VariantResult:
    return judged(name, verdict, within=within, backend=OV)  # type: ignore[arg-type]


def _careful(verdict: str, *, within: bool = True) -> VariantResult:
    variant = _ov("int8_nncf_ov_careful", verdict, within=within)
    assert [s.config for s in variant.recipe.steps] == [CAREFUL_CALIBRATION]
    return variant


@pytest.mark.parametrize(
    ("variants", "offered"),
    [
        pytest.param(
            [_ov("int8_nncf_ov", FASTER, within=False)], ["int8_nncf_ov_careful"], id="missed"
        ),
        pytest.param([_ov("int8_nncf_ov", FASTER)], [], id="int8-nncf-ov-pays"),
        pytest.param([_ov("int8_nncf_ov", SLOWER, within=False)], [], id="slower-and-out"),
        pytest.param(
            [
                _ov("int8_nncf_ov", FASTER, within=False),
                _ov("int8_nncf_ov_bf16", FASTER, within=False),
            ],
            ["int8_nncf_ov_careful", "int8_nncf_ov_careful_bf16"],
            id="both-precisions-missed",
        ),
        pytest.param(
            [_ov("int8_nncf_ov", FASTER, within=False), _careful(SLOWER, within=False)],
            [],
            id="already-careful",
        ),
        pytest.param([_ov("int8_nncf", FASTER, within=False)], [], id="nncf-on-the-onnx-graph"),
    ],
)
def test_auto_offers_the_careful_calibration_first_where_nncf_defaults_missed(
    variants: list[VariantResult], offered: list[str]
) -> None:
    assert [recipe.name for recipe in offer_careful_calibration(variants)] == offered


def test_the_careful_offer_keeps_the_missed_variants_flavour() -> None:
    (recipe,) = offer_careful_calibration([_ov("int8_nncf_ov_transformer", FASTER, within=False)])

    assert recipe.steps == [
        RecipeStep(step="int8_nncf_ov", config={"model_type": "transformer", **CAREFUL_CALIBRATION})
    ]
    assert (recipe.backend, recipe.precision) == (OV, None)


@pytest.mark.parametrize(
    ("variants", "offered"),
    [
        pytest.param([_ov("int8_nncf_ov", FASTER, within=False)], ["int8_nncf_ov_ac"], id="missed"),
        pytest.param([_ov("int8_nncf_ov", FASTER)], [], id="int8-nncf-ov-pays"),
        pytest.param([_ov("int8_nncf_ov", SLOWER, within=False)], [], id="slower-and-out"),
        pytest.param([_ov("int8_nncf_ov", NO_DIFFERENCE, within=False)], [], id="not-faster"),
        pytest.param(
            [_ov("int8_nncf_ov", FASTER, within=False), _ov("int8_nncf_ov_bf16", FASTER)],
            [],
            id="its-bf16-twin-pays",
        ),
        pytest.param(
            [
                _ov("int8_nncf_ov", FASTER, within=False),
                _ov("int8_nncf_ov_bf16", FASTER, within=False),
            ],
            ["int8_nncf_ov_ac", "int8_nncf_ov_ac_bf16"],
            id="both-precisions-missed",
        ),
        pytest.param(
            [_ov("int8_nncf_ov_transformer", FASTER, within=False)],
            ["int8_nncf_ov_ac"],
            id="transformer-flavour-missed",
        ),
        pytest.param([_ov("int8_nncf", FASTER, within=False)], [], id="nncf-on-the-onnx-graph"),
        pytest.param([unmade("int8_nncf_ov", "failed")], [], id="failed"),
        pytest.param(
            [_ov("int8_nncf_ov", FASTER, within=False), _ov("int8_nncf_ov_ac", SLOWER)],
            [],
            id="already-controlled",
        ),
        pytest.param(
            [_ov("int8_nncf_ov", FASTER, within=False), _careful(FASTER)], [], id="careful-pays"
        ),
        pytest.param(
            [_ov("int8_nncf_ov", FASTER, within=False), _careful(FASTER, within=False)],
            ["int8_nncf_ov_ac"],
            id="careful-missed-too",
        ),
    ],
)
def test_auto_offers_accuracy_control_only_when_nncf_int8_on_openvino_was_faster_but_out(
    variants: list[VariantResult], offered: list[str]
) -> None:
    assert [recipe.name for recipe in offer_accuracy_control(variants)] == offered


def _with_front_end(variant: VariantResult, *, ops: int, kept: int = 0) -> VariantResult:
    """`variant` as its int8_nncf_ov step reported a model with `ops` ops feeding a Log."""
    details = {"log_front_end_ops": ops, "float_front_end": kept}
    variant.steps = [StepReport(step="int8_nncf_ov", details=details, warnings=[])]
    return variant


@pytest.mark.parametrize(
    ("ops", "kept", "front"),
    [
        pytest.param(34, 0, {"float_front_end": True}, id="a-quantized-log-front-end"),
        pytest.param(0, 0, {}, id="no-log"),
        pytest.param(34, 34, {}, id="front-end-already-in-float"),
    ],
)
def test_both_offers_keep_a_log_front_end_in_float_where_the_missed_variant_quantized_one(
    ops: int, kept: int, front: dict[str, bool]
) -> None:
    missed = _with_front_end(_ov("int8_nncf_ov", FASTER, within=False), ops=ops, kept=kept)

    (careful,) = offer_careful_calibration([missed])
    (controlled,) = offer_accuracy_control([missed])

    assert [s.config for s in careful.steps] == [{**CAREFUL_CALIBRATION, **front}]
    assert [(s.step, s.config) for s in controlled.steps] == [("int8_nncf_ov_ac", front)]
    for recipe in (careful, controlled):  # the label says so, as the variant is shown
        assert recipe.label.endswith(FRONT_END_LABEL) is bool(front)
        shown = as_offered(on_backend(BUILTIN_RECIPES[recipe.name], OV), recipe)
        assert shown.label == f"{recipe.label} on {OV}" and shown.steps == recipe.steps


def test_the_offer_keeps_the_missed_variants_options() -> None:
    (recipe,) = offer_accuracy_control([_ov("int8_nncf_ov_transformer", FASTER, within=False)])

    assert [(s.step, s.config) for s in recipe.steps] == [
        ("int8_nncf_ov_ac", {"model_type": "transformer"})
    ]
    assert (recipe.backend, recipe.precision) == (OV, None)


def test_it_resolves_by_name_as_an_openvino_ir_recipe() -> None:
    recipe = get_recipe("int8_nncf_ov_ac")
    twin = get_recipe("int8_nncf_ov_ac_bf16")

    assert [s.step for s in recipe.steps] == ["int8_nncf_ov_ac"] == [s.step for s in twin.steps]
    assert (recipe.backend, recipe.precision, twin.precision) == (OV, None, "bf16")
    assert "int8_nncf_ov_ac" in BUILTIN_RECIPES


def _making(tmp_path: Path) -> Making:
    model = build_outlier_model(tmp_path / "outliers.onnx")
    quick = ComparisonSpec(min_pairs=4, min_seconds=0.1, max_seconds=1.0, threads=1)
    spec = OptimizeSpec(
        comparison=quick, unsteady_timing=UnsteadyTiming(candidate_seconds=0, job_seconds=0)
    )
    judging = Judging(Outliers(seed=1), None, None, None, calibration=Outliers(seed=2))
    return Making(model, inspect_model(model), spec, tmp_path / "out", judging)


@pytest.mark.parametrize("recipes", [["auto"], ["int8_nncf_ov"]], ids=["auto", "named"])
def test_auto_adds_the_controlled_int8_and_judges_it_as_every_variant(
    tmp_path: Path, recipes: list[str]
) -> None:
    made = _making(tmp_path)
    missed = on_backend(BUILTIN_RECIPES["int8_nncf_ov"], OV)
    variants = [_ov("int8_nncf_ov", FASTER, within=False)]
    variants[0].recipe = missed

    _add_accuracy_control(made, OptimizeSpec(recipes=recipes), variants, ignore_progress)

    if recipes != ["auto"]:
        assert len(variants) == 1
        return
    careful, added = variants[1:]
    assert careful.recipe.name.split("@")[0] == "int8_nncf_ov_careful"
    assert careful.status == "made" and careful.judged, careful.error
    assert careful.steps[0].details["activation_ranges"] == "global"
    assert not careful.within_budget, careful.budget_note  # the outliers break it too
    assert added.recipe.name.split("@")[0] == "int8_nncf_ov_ac"
    assert (added.status, added.backend, added.precision) == ("made", OV, "int8"), added.error
    assert added.within_budget, added.budget_note
    assert added.path is not None and added.path.endswith(".xml")
    assert added.verdict is not None  # timed against the original too


def test_the_bf16_twin_is_not_searched_again_when_the_search_kept_no_file(
    tmp_path: Path,
) -> None:
    """Both precisions missed; the FP32 search runs out of its time at once, so the BF16 twin
    (the same search: candidates judged in FP32) takes its outcome without running a pass."""
    made = _making(tmp_path)
    variants = []
    for name in ("int8_nncf_ov", "int8_nncf_ov_bf16"):
        variant = _ov(name, FASTER, within=False)
        variant.recipe = on_backend(BUILTIN_RECIPES[name], OV)
        variants.append(variant)
    spec = OptimizeSpec(recipes=["auto"], pass_settings={"int8_nncf_ov_ac": {"time_limit_s": 1e-6}})

    _add_accuracy_control(made, spec, variants, ignore_progress)

    assert [v.recipe.name.split("@")[0] for v in variants[2:4]] == [
        "int8_nncf_ov_careful",
        "int8_nncf_ov_careful_bf16",
    ]
    searched, twin = variants[4:]
    assert searched.recipe.name.split("@")[0] == "int8_nncf_ov_ac"
    assert searched.status == "not_applicable" and searched.steps == [], searched.error
    assert twin.recipe.name.split("@")[0] == "int8_nncf_ov_ac_bf16"
    assert (twin.status, twin.backend, twin.path, twin.steps) == ("not_applicable", OV, None, [])
    assert twin.error is not None and searched.error is not None
    assert twin.error.message.startswith(f"{searched.recipe.name} ran the same search")
    assert searched.error.message.split(": ", 1)[-1] in twin.error.message
    assert twin.why_not_applicable().startswith("not applicable to this graph: ")


def test_a_made_search_is_timed_again_at_bf16_not_set_aside() -> None:
    from optistudio.core.optimize.accuracy_offer import searched_without_a_file

    twin = on_backend(BUILTIN_RECIPES["int8_nncf_ov_ac_bf16"], OV)
    made = _ov("int8_nncf_ov_ac", FASTER)
    made.recipe = on_backend(BUILTIN_RECIPES["int8_nncf_ov_ac"], OV)
    assert searched_without_a_file(twin, OV, [made]) is None
    failed = unmade("int8_nncf_ov_ac", "failed")
    failed.recipe, failed.backend = made.recipe, OV
    assert searched_without_a_file(twin, OV, [failed]) is failed
    assert searched_without_a_file(made.recipe, OV, [failed]) is None  # its own precision
    # its file made, then failed at its own precision: the twin runs that file at another
    failed.steps = [StepReport(step="int8_nncf_ov_ac", details={}, warnings=[])]
    assert searched_without_a_file(twin, OV, [failed]) is None
