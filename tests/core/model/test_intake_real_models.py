"""Models as users bring them: intake accepts what ONNX Runtime runs and refuses, at upload and
without a server path in the words, what no backend here loads."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends.loadable import check_loads
from optistudio.core.data.inputs import DEFAULT_DYNAMIC_DIM, synthesize_inputs
from optistudio.core.errors import ErrorCode, ModelRejected
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model, store_model


def relu_model(shape: list, *, ir_version: int = 8, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
    )
    return helper.make_model(
        graph, ir_version=ir_version, opset_imports=[helper.make_opsetid("", opset)]
    )


def old_conv_model(opset: int, *, weight_listed_as_input: bool) -> onnx.ModelProto:
    """An IR 3 model as old exporters wrote it: Conv with weight conv1_w_0."""
    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "conv1_w_0")
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    if weight_listed_as_input:
        inputs.append(helper.make_tensor_value_info("conv1_w_0", TensorProto.FLOAT, [4, 3, 3, 3]))
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "conv1_w_0"], ["y"])],
        "old",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        initializer=[weight],
    )
    return helper.make_model(graph, ir_version=3, opset_imports=[helper.make_opsetid("", opset)])


def custom_op_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("FancyOp", ["x"], ["y"], domain="com.acme")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.acme", 1)]
    return helper.make_model(graph, ir_version=8, opset_imports=opsets)


def save(model: onnx.ModelProto, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def refusal(path: Path) -> ModelRejected:
    with pytest.raises(ModelRejected) as caught:
        inspect_model(path, load_check=check_loads)
    return caught.value


def test_paddle_negative_dims_are_dynamic(tmp_path: Path) -> None:
    path = save(relu_model([-1, 3, -1, -1]), tmp_path / "paddle.onnx")

    info = inspect_model(path, load_check=check_loads)

    assert info.inputs[0].shape == [None, 3, None, None]
    assert info.inputs[0].dynamic_dims == [0, 2, 3]
    assert info.outputs[0].shape == [None, 3, None, None]


def test_question_mark_dims_are_independent(tmp_path: Path) -> None:
    path = save(relu_model(["?", 3, "?", "?"]), tmp_path / "rec.onnx")
    info = inspect_model(path, load_check=check_loads)

    feeds, warnings = synthesize_inputs(
        info.inputs, batch_size=2, dims={"x.2": 48, "x.3": 320, "?": 5}
    )

    assert info.inputs[0].shape == [None, 3, None, None]
    assert feeds["x"].shape == (2, 3, 48, 320)
    assert warnings == []
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.run(None, feeds)[0].shape == (2, 3, 48, 320)


def test_unset_question_mark_dims_default_one_by_one(tmp_path: Path) -> None:
    path = save(relu_model(["?", 3, "?", "?"]), tmp_path / "rec.onnx")
    info = inspect_model(path)

    feeds, warnings = synthesize_inputs(info.inputs, batch_size=1, dims={"x.3": 100})

    assert feeds["x"].shape == (1, 3, DEFAULT_DYNAMIC_DIM, 100)
    assert [w.split(" set to")[0] for w in warnings] == ["dynamic dim 2 of input 'x'"]


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        pytest.param(["?", 3, "?"], [None, 3, None], id="question-marks"),
        pytest.param(["", "batch"], [None, "batch"], id="empty-name"),
        pytest.param([-1, 3], [None, 3], id="negative-size"),
        pytest.param(["batch", "seq", 8], ["batch", "seq", 8], id="real-names-kept"),
    ],
)
def test_a_stored_card_reads_anonymous_dims_as_unnamed(stored: list, read: list) -> None:
    assert TensorSpec.model_validate({"name": "x", "dtype": "float32", "shape": stored}).shape == (
        read
    )


@pytest.mark.parametrize("opset", [7, 8], ids=["opset-7", "opset-8"])
@pytest.mark.parametrize("listed", [True, False], ids=["weight-listed", "weight-unlisted"])
def test_an_ir3_model_is_accepted_and_its_weights_are_not_inputs(
    tmp_path: Path, opset: int, listed: bool
) -> None:
    path = save(old_conv_model(opset, weight_listed_as_input=listed), tmp_path / "old.onnx")

    info = inspect_model(path, load_check=check_loads)

    assert info.ir_version == 3
    assert [(spec.name, spec.shape) for spec in info.inputs] == [("x", [1, 3, 8, 8])]
    assert info.parameter_count == 4 * 3 * 3 * 3
    assert not [w for w in info.warnings if f"opset {opset}" in w]  # ONNX Runtime runs 7 and up


def test_the_checker_still_refuses_a_broken_ir3_model(tmp_path: Path) -> None:
    model = old_conv_model(8, weight_listed_as_input=False)
    model.graph.node[0].input[0] = "nowhere"
    path = save(model, tmp_path / "old.onnx")

    assert "checker rejected the model" in refusal(path).message


def test_a_custom_domain_op_is_refused_naming_op_and_domain(tmp_path: Path) -> None:
    source = save(custom_op_model(), tmp_path / "incoming" / "tmpab12cd" / "fancy.onnx")
    artifacts = tmp_path / "artifacts"

    with pytest.raises(ModelRejected) as caught:
        store_model(source, artifact_dir=artifacts, load_check=check_loads)

    error = caught.value
    assert "uses the operator FancyOp from domain com.acme" in error.message
    assert "which no backend here implements" in error.message
    assert error.hint and "opset" not in error.hint
    assert error.info().code is ErrorCode.model_rejected
    assert not artifacts.exists()


@pytest.mark.parametrize(
    "model",
    [
        pytest.param(custom_op_model(), id="custom-op"),
        pytest.param(
            helper.make_model(
                helper.make_graph(
                    [helper.make_node("Add", ["x", "z"], ["y"])],
                    "g",
                    [
                        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                        helper.make_tensor_value_info("z", TensorProto.INT64, [1]),
                    ],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                ),
                ir_version=8,
                opset_imports=[helper.make_opsetid("", 17)],
            ),
            id="types-ort-refuses",
        ),
        pytest.param(
            helper.make_model(
                helper.make_graph(
                    [helper.make_node("Relu", ["nowhere"], ["y"])],
                    "g",
                    [],
                    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                ),
                ir_version=8,
                opset_imports=[helper.make_opsetid("", 17)],
            ),
            id="checker-refuses",
        ),
    ],
)
def test_no_refusal_names_a_server_path(tmp_path: Path, model: onnx.ModelProto) -> None:
    path = save(model, tmp_path / "incoming" / "tmpx9" / "upload.onnx")

    error = refusal(path)

    for text in (error.message, error.hint or ""):
        assert str(tmp_path) not in text
        assert str(path.parent) not in text


def test_a_type_error_is_not_blamed_on_the_opset(tmp_path: Path) -> None:
    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Add", ["x", "z"], ["y"])],
            "g",
            [
                helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
                helper.make_tensor_value_info("z", TensorProto.INT64, [1]),
            ],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        ),
        ir_version=8,
        opset_imports=[helper.make_opsetid("", 17)],
    )

    error = refusal(save(model, tmp_path / "m.onnx"))

    assert error.message.startswith("ONNX Runtime could not load the model: ")
    assert "Add" in error.message
    assert "opset" not in (error.hint or "")


def test_a_load_checks_words_lose_the_folder(tmp_path: Path) -> None:
    path = save(relu_model([1, 3]), tmp_path / "deep" / "m.onnx")

    def says_the_path(model: Path) -> None:
        raise ModelRejected(f"cannot open {model.resolve()}", hint=f"look in {model.parent}")

    with pytest.raises(ModelRejected) as caught:
        inspect_model(path, load_check=says_the_path)

    assert caught.value.message == "cannot open m.onnx"
    assert caught.value.hint == "look in ."


def test_a_valid_model_still_passes_and_is_stored(tmp_path: Path, tiny_model: Path) -> None:
    stored = store_model(tiny_model, artifact_dir=tmp_path / "artifacts", load_check=check_loads)

    assert stored.path.is_file()
    assert [spec.shape for spec in stored.info.inputs] == [["batch", 16]]
