"""Recipes on files as users upload them: a recipe that leaves the model as it is keeps its
external data, and Auto does not quantize a model that is INT8 already."""

from __future__ import annotations

from pathlib import Path

import onnxruntime as ort
from diagnostic_models import build_cnn, quantize_cnn
from export_models import external_data_model

from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.making import check_variant, run_recipe
from optistudio.core.optimize.recipes import any_backend_candidates, auto_candidates, get_recipe
from optistudio.core.passes.base import PassContext


def test_the_fp32_recipe_copies_the_external_data(tmp_path: Path) -> None:
    model = external_data_model(tmp_path / "upload" / "model.onnx")
    recipe = get_recipe("fp32")

    final, _, _ = run_recipe(model, recipe, tmp_path / "fp32", PassContext(work_dir=tmp_path))

    assert (final.parent / "weights.bin").is_file()
    check_variant(final, recipe)  # "External data file(s) missing next to the model" before
    ort.InferenceSession(str(final))


def test_auto_does_not_quantize_an_int8_model_again(tmp_path: Path) -> None:
    cnn = build_cnn(tmp_path / "cnn.onnx")
    qdq = inspect_model(quantize_cnn(cnn, tmp_path / "qdq.onnx", mode="static"))

    names = [r.name for r in auto_candidates(qdq) + any_backend_candidates(qdq, ["openvino"])]

    assert not [name for name in names if "int8" in name]
    assert "int8_static" in [r.name for r in auto_candidates(inspect_model(cnn))]
