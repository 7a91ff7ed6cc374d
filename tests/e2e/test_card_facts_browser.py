"""Card facts that are true (issue 44, item 6), on the Models page in real headless Chromium
against a real `optistudio up` stack: a file quantized as given says "already quantized (QDQ)"
on its card; a model no input reaches warns that every accuracy check compares constants; a
graph that generates its weights counts them, and an opset ONNX Runtime runs draws no warning.
Each fact shows on its own model's card only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from browser import UI_TIMEOUT_MS, Studio, shot
from diagnostic_models import build_cnn, quantize_cnn
from onnx import TensorProto, helper, numpy_helper
from seed_models import add_models

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.shared_studio]

QUANTIZED = "This file is already quantized (QDQ): it holds quantization ops as uploaded"
CONSTANT = "No input reaches the model's outputs (y): they are computed from weights"
GENERATED = (64, 500)
"""The weight a ConstantOfShape makes in the graph: 32,000 parameters the file does not store."""


def constant_model(path: Path) -> Path:
    """y = relu(c): the input x is declared and read by nothing, so y never changes."""
    constant = helper.make_tensor("c", TensorProto.FLOAT, [1, 3], [0.5, -1.0, 2.0])
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["c"], value=constant),
            helper.make_node("Relu", ["c"], ["y"]),
        ],
        "constant",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    return _save(graph, path, opset=17)


def generated_weights_model(path: Path) -> Path:
    """y = x @ ConstantOfShape([64, 500]) at opset 9: its weight is made in the graph."""
    shape = numpy_helper.from_array(np.array(GENERATED, np.int64), "shape")
    fill = helper.make_tensor("fill", TensorProto.FLOAT, [1], [0.01])
    graph = helper.make_graph(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["w"], value=fill),
            helper.make_node("MatMul", ["x", "w"], ["y"]),
        ],
        "generated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", GENERATED[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", GENERATED[1]])],
        initializer=[shape],
    )
    return _save(graph, path, opset=9)


def _save(graph: onnx.GraphProto, path: Path, *, opset: int) -> Path:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def open_card(page, studio: Studio, model_id: int, name: str) -> None:  # type: ignore[no-untyped-def]
    """The Models page on model `model_id`, once its card and task section have drawn."""
    from playwright.sync_api import expect

    page.goto(f"{studio.url}/models?model={model_id}")
    expect(page.get_by_text(f"Model card · {name}")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_text("Recognized:", exact=False).first).to_be_visible()
    app = page.get_by_test_id("stApp")
    expect(app).to_have_attribute("data-test-script-state", "notRunning", timeout=UI_TIMEOUT_MS)


def card_metric(page, label: str) -> str:  # type: ignore[no-untyped-def]
    box = page.locator("[data-testid='stMetric']").filter(has_text=label)
    return str(box.locator("[data-testid='stMetricValue']").inner_text()).strip()


def test_each_card_says_what_its_file_is(
    studio: Studio, page, studio_settings, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    qdq = quantize_cnn(build_cnn(tmp_path / "cnn.onnx"), tmp_path / "qdq.onnx", mode="static")
    files = [qdq, constant_model(tmp_path / "constant.onnx")]
    files.append(generated_weights_model(tmp_path / "generated.onnx"))
    ids = dict(
        zip(("qdq", "constant", "generated"), add_models(studio_settings, files), strict=True)
    )

    open_card(page, studio, ids["qdq"], "qdq")
    expect(page.get_by_text(QUANTIZED)).to_be_visible()
    expect(page.get_by_text(CONSTANT)).to_have_count(0)
    shot(page, "card-quantized")

    open_card(page, studio, ids["constant"], "constant")
    warning = page.locator("[data-testid='stAlert']").filter(has_text=CONSTANT)
    expect(warning).to_be_visible()
    expect(warning).to_contain_text("every accuracy check compares constants")
    expect(page.get_by_text(QUANTIZED)).to_have_count(0)
    shot(page, "card-constant")

    open_card(page, studio, ids["generated"], "generated")
    made = GENERATED[0] * GENERATED[1]  # and the 2-element shape and the fill, as stored
    assert card_metric(page, "Parameters") == f"{(made + 3) / 1e3:.2f} K"
    assert card_metric(page, "Opset") == "9"
    expect(page.get_by_text("opset 9", exact=False)).to_have_count(0)  # ONNX Runtime runs it
    expect(page.get_by_text(CONSTANT)).to_have_count(0)
    expect(page.get_by_text(QUANTIZED)).to_have_count(0)
    assert "Traceback" not in page.content()
