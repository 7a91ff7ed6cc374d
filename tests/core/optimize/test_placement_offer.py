"""int8_placed as a recipe (by name, on ONNX Runtime) and Auto's rule for offering it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends.base import Availability
from optistudio.core.errors import ErrorCode, ErrorInfo
from optistudio.core.measure.compare import FASTER, NO_DIFFERENCE, SLOWER, Verdict
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import AccuracyReport
from optistudio.core.optimize.applicability import applicability
from optistudio.core.optimize.placement_offer import PLACEMENT_RECIPE, offer_int8_placement
from optistudio.core.optimize.recipes import (
    BUILTIN_RECIPES,
    auto_candidates,
    get_recipe,
    int8_notes,
    on_backend,
    resolve_recipes,
)
from optistudio.core.optimize.variant import VariantResult

ACCURACY = AccuracyReport.model_validate(
    {"samples": 4, "data": "synthetic", "mean_cosine": 0.999, "min_cosine": 0.998}
    | {"max_abs_error": 0.01, "mean_abs_error": 0.001, "nan_or_inf": False}
    | {"per_output_max_abs_error": {"y": 0.01}}
)


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> ModelInfo:
    """A one-Conv model's inspection: what Auto's candidates are chosen from."""
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")],
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 6, 6])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path_factory.mktemp("offer") / "cnn.onnx"
    onnx.save(model, path)
    return inspect_model(path)


def judged(
    name: str, verdict: Verdict, *, within: bool = True, backend: str = "onnxruntime"
) -> VariantResult:
    recipe = on_backend(BUILTIN_RECIPES[name], backend)
    return VariantResult(
        recipe=recipe,
        precision="int8",
        backend=backend,
        accuracy=ACCURACY,
        within_budget=within,
        verdict=verdict,
        ratio=0.8 if verdict == FASTER else 1.2,
    )


def unmade(name: str, status: str) -> VariantResult:
    variant = VariantResult(recipe=BUILTIN_RECIPES[name], precision="int8")
    error = ErrorInfo(code=ErrorCode.pass_failed, message="Not applicable to this graph: no.")
    if status == "not_applicable":
        variant.set_aside(error)
    else:
        variant.fail(error)
    return variant


@pytest.mark.parametrize(
    ("variants", "offered"),
    [
        pytest.param([judged("int8_static", SLOWER)], True, id="static-int8-slower"),
        pytest.param([judged("int8_static", NO_DIFFERENCE)], True, id="not-faster"),
        pytest.param(
            [judged("int8_static", FASTER, within=False)], True, id="faster-out-of-budget"
        ),
        pytest.param(
            [judged("int8_static", SLOWER), judged("int8_static_percentile", FASTER)],
            False,
            id="one-static-int8-pays",
        ),
        pytest.param([judged("int8_static", FASTER)], False, id="static-int8-pays"),
        pytest.param([judged("graph", SLOWER)], False, id="no-int8"),
        pytest.param([judged("int8_dynamic", SLOWER)], False, id="dynamic-int8-only"),
        pytest.param(
            [judged("int8_nncf", SLOWER, backend="openvino")], False, id="int8-on-openvino-only"
        ),
        pytest.param([unmade("int8_static", "failed")], False, id="static-int8-failed"),
        pytest.param(
            [unmade("int8_static", "not_applicable")], False, id="static-int8-not-applicable"
        ),
        pytest.param(
            [judged("int8_static", SLOWER), judged(PLACEMENT_RECIPE, SLOWER)],
            False,
            id="already-placed",
        ),
    ],
)
def test_auto_offers_placement_only_when_static_int8_on_onnxruntime_did_not_pay(
    variants: list[VariantResult], offered: bool
) -> None:
    assert offer_int8_placement(variants) is offered


def test_int8_placed_resolves_by_name_and_runs_on_onnxruntime(cnn: ModelInfo) -> None:
    recipe = get_recipe("int8_placed")

    assert [step.step for step in recipe.steps] == ["simplify", "int8_placed"]
    assert (recipe.backend, recipe.label) == ("onnxruntime", "INT8 where it pays")
    (over_any,) = resolve_recipes(
        ["int8_placed"], cnn, target_backend="any", backends=["onnxruntime", "openvino"]
    )
    assert (over_any.name, over_any.backend) == ("int8_placed", "onnxruntime")


def test_auto_does_not_list_it_among_its_first_candidates(cnn: ModelInfo) -> None:
    names = [recipe.name for recipe in auto_candidates(cnn, flags=["avx2"])]

    assert "int8_static" in names and PLACEMENT_RECIPE not in names


def test_its_weights_follow_the_cpu_like_the_other_onnx_runtime_int8() -> None:
    (note,) = int8_notes([get_recipe("int8_placed")], flags=["avx2"])

    assert "int8_placed" in note


def test_it_applies_wherever_onnx_runtime_runs_on_the_cpu() -> None:
    here = {"onnxruntime": Availability(ok=True, reason="", devices=["cpu"])}

    found = applicability(get_recipe("int8_placed"), here, flags=["avx2"])

    assert found.applies and found.backend == "onnxruntime"
