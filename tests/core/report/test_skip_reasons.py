"""Every Core ML and LiteRT skip reason is a sentence: what could not be made, the library's
words, the kind of error when those words are bare, a full stop. ConstantOfShape of a fixed
shape is folded before Core ML's route; a Core ML package is made for a model with masks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import parser

from optistudio.core.model.intake import inspect_model
from optistudio.core.report import coreml
from optistudio.core.report.coreml_fold import folded_constant_shapes
from optistudio.core.report.litert import skip_reason
from optistudio.core.report.skip_reasons import sentence

MASKED = """
<ir_version: 8, opset_import: ["" : 17]>
masked (float[1, 6] x) => (float[1, 6] y) {
    shape = Constant <value = int64[2] {1, 6}> ()
    zeros = ConstantOfShape <value = float[1] {0.0}> (shape)
    pad = Equal (x, zeros)
    big = Constant <value = float {-100.0}> ()
    y = Where (pad, big, x)
}
"""


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            "axes don't match array",
            "onnx2tf and TensorFlow's TFLite converter could not convert this model: axes "
            "don't match array.",
        ),
        (
            "ValueError: axes don't match array",
            "onnx2tf and TensorFlow's TFLite converter could not convert this model: axes "
            "don't match array (ValueError).",
        ),
        (
            "",
            "onnx2tf and TensorFlow's TFLite converter could not convert this model: it "
            "stopped without saying why.",
        ),
        (
            "onnx2tf gave up (exit 1)",
            "onnx2tf and TensorFlow's TFLite converter could not convert this model: onnx2tf "
            "gave up (exit 1).",
        ),
    ],
    ids=["bare-numpy", "typed", "silent", "gave-up"],
)
def test_litert_skip_reasons_are_sentences(error: str, said: str) -> None:
    assert skip_reason(error) == said


@pytest.mark.parametrize(
    ("detail", "kind", "said"),
    [
        (
            "unsupported operand type(s) for +: 'NoneType' and 'int'",
            "TypeError",
            "coremltools could not convert the model: unsupported operand type(s) for +: "
            "'NoneType' and 'int' (TypeError).",
        ),
        (
            "The op is not supported.\nTraceback ...",
            "RuntimeError",
            "coremltools could not convert the model: The op is not supported.",
        ),
        ("TypeError", "TypeError", "coremltools could not convert the model: TypeError."),
    ],
    ids=["bare-type-error", "a-sentence-of-its-own", "nothing-but-the-kind"],
)
def test_a_library_message_becomes_one_sentence(detail: str, kind: str, said: str) -> None:
    assert sentence("coremltools could not convert the model", detail, kind=kind) == said


def test_constant_of_shape_of_a_fixed_shape_is_folded_to_the_same_tensor() -> None:
    model = parser.parse_model(MASKED)
    x = np.array([[0, 1, 0, 2, 3, 0]], np.float32)

    folded, count = folded_constant_shapes(model)

    assert count == 1
    assert "ConstantOfShape" not in {node.op_type for node in folded.graph.node}
    assert "ConstantOfShape" in {node.op_type for node in model.graph.node}  # a copy
    onnx.checker.check_model(folded, full_check=True)
    outputs = [
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"x": x}
        )
        for m in (model, folded)
    ]
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])


def test_a_computed_shape_is_left_to_the_bridge() -> None:
    model = parser.parse_model(
        """
        <ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3] x) => (float[N, 3] y) {
            s = Shape (x)
            y = ConstantOfShape <value = float[1] {1.0}> (s)
        }
        """
    )

    folded, count = folded_constant_shapes(model)

    assert (folded, count) == (model, 0)


@pytest.mark.extras
def test_a_model_with_equal_where_and_constant_of_shape_gets_core_ml_packages(
    tmp_path: Path,
) -> None:
    if absent := coreml.missing():
        pytest.skip(absent)
    path = tmp_path / "masked.onnx"
    onnx.save(parser.parse_model(MASKED), path)

    made = coreml.export_coreml(
        path, inspect_model(path), tmp_path, name="masked", precisions=["fp32"]
    )

    assert made.skipped == {}
    assert [package.precision for package in made.packages] == ["fp32"]
    assert made.route_check.startswith("traced PyTorch module")


def test_the_converters_child_reports_the_errors_kind_and_the_bundle_names_it() -> None:
    from optistudio.core.backends.litert_convert import _short

    reported = _short(ValueError("axes don't match array"))

    assert reported == "ValueError: axes don't match array"
    assert skip_reason(reported).endswith(
        "could not convert this model: axes don't match array (ValueError)."
    )
