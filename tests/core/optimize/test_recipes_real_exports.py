"""Recipes on files as users upload them: a recipe that leaves the model as it is keeps its
external data, and Auto quantizes a model that is INT8 already only through NNCF on its OpenVINO
model (ONNX Runtime's quantizer writes a graph the checker refuses)."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
from diagnostic_models import build_cnn, quantize_cnn
from export_models import external_data_model

from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.making import check_variant, run_recipe
from optistudio.core.optimize.recipes import any_backend_candidates, auto_candidates, get_recipe
from optistudio.core.optimize.run import optimize
from optistudio.core.optimize.spec import OptimizeSpec
from optistudio.core.passes.base import PassContext

AVX2 = ["sse4_2", "fma", "f16c", "avx", "avx2"]
"""A CPU without BF16: no INT8-with-the-rest-in-BF16 candidates."""


def test_the_fp32_recipe_copies_the_external_data(tmp_path: Path) -> None:
    model = external_data_model(tmp_path / "upload" / "model.onnx")
    recipe = get_recipe("fp32")

    final, _, _ = run_recipe(model, recipe, tmp_path / "fp32", PassContext(work_dir=tmp_path))

    assert (final.parent / "weights.bin").is_file()
    check_variant(final, recipe)  # "External data file(s) missing next to the model" before
    ort.InferenceSession(str(final))


def test_auto_quantizes_an_int8_model_again_only_through_its_openvino_model(
    tmp_path: Path,
) -> None:
    cnn = build_cnn(tmp_path / "cnn.onnx")
    qdq = inspect_model(quantize_cnn(cnn, tmp_path / "qdq.onnx", mode="static"))

    names = [
        r.name
        for r in auto_candidates(qdq, flags=AVX2)
        + any_backend_candidates(qdq, ["openvino"], flags=AVX2)
    ]

    assert [name for name in names if "int8" in name] == ["int8_nncf_ov@openvino"]
    assert "int8_static" in [r.name for r in auto_candidates(inspect_model(cnn))]


def test_nncf_on_the_openvino_model_of_an_int8_file_keeps_its_outputs(tmp_path: Path) -> None:
    """What NNCF does with a converted QDQ file: its FakeQuantize kept, the float layers left
    quantized; a variant OpenVINO runs, within the default budget of the original."""
    cnn = build_cnn(tmp_path / "cnn.onnx")
    qdq = quantize_cnn(cnn, tmp_path / "qdq.onnx", mode="static")
    spec = OptimizeSpec(recipes=["int8_nncf_ov"], target_backend="openvino", accuracy_samples=4)

    report = optimize(qdq, spec, out_dir=tmp_path / "out")

    (variant,) = report.variants
    assert variant.status == "made" and variant.precision == "int8", variant.error
    assert variant.within_budget, variant.budget_note
