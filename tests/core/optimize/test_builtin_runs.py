"""A run without data: INT8 calibrated and variants judged on built-in samples (never random)
where the model's inputs have a set, marked so everywhere; random inputs only as the last
resort, and no variant calibrated on them chosen; the choice and the headline say it."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.numerics.accuracy import AccuracyReport
from optistudio.core.optimize import run
from optistudio.core.optimize.headline import headline, left_out
from optistudio.core.optimize.recipes import BUILTIN_RECIPES
from optistudio.core.optimize.run import OptimizeSpec, VariantResult, choose, optimize
from tests.conftest import image_classifier

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=2.0, threads=1)
GIVE = "--calib FILE"


def one_run(model: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[object, list[str]]:
    """int8_static without data, and the descriptions of what its passes calibrated on."""
    seen: list[str] = []
    made = run.made_file

    def spy(model, recipe, out_dir, context, earlier):  # type: ignore[no-untyped-def]
        seen.append(context.calibration.description)
        return made(model, recipe, out_dir, context, earlier)

    monkeypatch.setattr(run, "made_file", spy)
    spec = OptimizeSpec(
        recipes=["int8_static"], target_backend="onnxruntime", comparison=QUICK, accuracy_samples=4
    )
    return optimize(model, spec, out_dir=out), seen


def test_int8_calibrates_on_built_in_samples_not_random_and_the_report_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = image_classifier(tmp_path / "classifier.onnx")

    report, calibrated_on = one_run(model, tmp_path / "out", monkeypatch)

    [variant] = report.variants
    assert calibrated_on and calibrated_on[0].startswith("built-in samples: image: 4 crops")
    assert variant.builtin_samples == "calibrated and judged"
    assert not variant.calibrated_on_random
    assert variant.accuracy.data == "builtin" and variant.accuracy.task == "classification"
    assert variant.budget_note.endswith(
        "; calibrated and judged on built-in samples, not your data"
    )
    assert report.data.startswith("built-in samples: image: 4 crops of ")
    assert "INT8 calibrated on other samples of the same sets" in report.data
    [note] = [n for n in report.notes if n.startswith("Built-in samples, not your data")]
    assert "INT8 static (MinMax)" in note and GIVE in note
    dumped = report.model_dump(mode="json")["variants"][0]
    assert dumped["builtin_samples"] == "calibrated and judged"


def test_an_input_with_no_built_in_set_falls_back_to_random_and_is_never_chosen(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, calibrated_on = one_run(tiny_model, tmp_path / "out", monkeypatch)

    [variant] = report.variants
    assert calibrated_on[0].startswith("4 synthetic samples (random inputs")
    assert variant.calibrated_on_random and variant.builtin_samples is None
    assert variant.accuracy.data == "synthetic"
    [note] = [n for n in report.notes if n.startswith("Calibrated on random inputs")]
    assert "no built-in samples: input 'x'" in note
    fast = variant.model_copy(
        update={"ratio": 0.5, "ratio_low": 0.45, "ratio_high": 0.55, "verdict": "faster"}
        | {"speedup": 2.0, "within_budget": True}
    )
    assert choose([fast]) is None
    assert choose([fast], speed_only=True) is fast


def judged(name: str, task: str | None, *, speedup: float = 2.0) -> VariantResult:
    """An INT8 variant calibrated and judged on built-in samples, in budget and faster."""
    accuracy = AccuracyReport.model_validate(
        {"samples": 4, "data": "builtin", "mean_cosine": 0.999, "min_cosine": 0.998}
        | {"max_abs_error": 0.01, "mean_abs_error": 0.001, "nan_or_inf": False}
        | {"per_output_max_abs_error": {"y": 0.01}, "task": task}
    )
    ratio = 1 / speedup
    return VariantResult(
        recipe=BUILTIN_RECIPES[name],
        precision="int8",
        accuracy=accuracy,
        within_budget=True,
        budget_note="within budget: box_f1 100.00% >= 95.00%",
        builtin_samples="calibrated and judged",
        ratio=ratio,
        ratio_low=ratio * 0.98,
        ratio_high=ratio * 1.02,
        verdict="faster",
        speedup=speedup,
    )


def test_auto_chooses_a_built_in_calibrated_variant_its_task_check_passed_and_says_so() -> None:
    nncf = judged("int8_nncf", "detection_map", speedup=1.75)

    assert choose([nncf]) is nncf
    said = headline([nncf], "int8_nncf")
    assert said.startswith("Chosen: INT8 NNCF (for OpenVINO), 1.75x faster")
    assert said.endswith(", calibrated and judged on built-in samples, not your data.")


def test_with_no_task_to_check_it_a_built_in_calibrated_variant_waits_for_data() -> None:
    nncf = judged("int8_nncf", None, speedup=1.75)

    assert choose([nncf]) is None and choose([nncf], speed_only=True) is nncf
    out = left_out([nncf], None)
    assert out.sentence() == (
        "INT8 NNCF (for OpenVINO) 1.75x left out: calibrated on built-in samples with no task "
        "to check it; give data to confirm."
    )


def test_a_left_out_variant_judged_on_built_in_samples_says_so() -> None:
    slow = judged("int8_static", "classification", speedup=1.5).model_copy(
        update={"within_budget": False, "budget_note": "over budget: top1_drop 3.00% > 1.00%"}
    )

    reason = left_out([slow], None).reason

    assert reason == "missed the accuracy budget on built-in samples (top1_drop 3.00% > 1.00%)"


def test_two_image_inputs_each_get_a_normalisation_probed_on_the_fp32_model(
    tmp_path: Path,
) -> None:
    from optistudio.core.data.datasets import SyntheticDataset
    from optistudio.core.model.intake import inspect_model
    from optistudio.core.optimize.no_data import without_data

    nodes = [
        helper.make_node("Add", ["left", "right"], ["both"]),
        helper.make_node("GlobalAveragePool", ["both"], ["pooled"]),
        helper.make_node("Flatten", ["pooled"], ["flat"]),
        helper.make_node("Softmax", ["flat"], ["probs"], axis=-1),
    ]
    images = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, ["batch", 3, 8, 8])
        for n in ("left", "right")
    ]
    out = [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 3])]
    model = helper.make_model(
        helper.make_graph(nodes, "pair", images, out), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.save(model, tmp_path / "pair.onnx")
    base = SyntheticDataset(inspect_model(tmp_path / "pair.onnx").inputs, samples=2)

    fed = without_data(tmp_path / "pair.onnx", base, "classification")

    batch = next(iter(fed.judged.batches()))
    assert set(batch) == {"left", "right"} and batch["left"].shape == (1, 3, 8, 8)
    assert "left: 2 crops" in fed.description and "right: 2 crops" in fed.description
    assert "most confident" in fed.description
