"""Models that declare more memory than the machine has are refused before anything loads them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.errors import ModelRejected
from optistudio.core.model.intake import inspect_model


def model_of(nodes, inputs, outputs, initializer=()) -> onnx.ModelProto:  # type: ignore[no-untyped-def]
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializer))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


@pytest.fixture
def no_checker(monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal must come before onnx.checker (which reads the model) is ever called."""

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("the checker ran before the size check")

    monkeypatch.setattr(onnx.checker, "check_model", fail)


def test_an_external_weight_declaring_a_terabyte_is_refused_before_loading(tmp_path, no_checker):
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[1_000_000, 1_000_000])
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="w.bin")
    (tmp_path / "w.bin").write_bytes(b"\0" * 64)
    model = model_of(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1_000_000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1_000_000])],
        [weight],
    )

    with pytest.raises(ModelRejected, match=r"tensor 'W' of shape \[1000000x1000000\]") as caught:
        inspect_model(save(model, tmp_path / "m.onnx"), max_tensor_bytes=2**30)
    assert "OPTISTUDIO_MAX_TENSOR_MB" in str(caught.value)


def test_an_external_weight_declaring_more_than_its_file_holds_is_refused(tmp_path, no_checker):
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[100, 100])  # 40,000 bytes
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value="w.bin")  # no length: the dims decide
    (tmp_path / "w.bin").write_bytes(b"\0" * 64)
    model = model_of(
        [helper.make_node("Identity", ["W"], ["y"])],
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [100, 100])],
        [weight],
    )
    with pytest.raises(ModelRejected, match=r"too short for tensor 'W' \(64 bytes, needs 40,000\)"):
        inspect_model(save(model, tmp_path / "m.onnx"))


def test_a_fixed_shape_input_too_big_to_synthesise_is_refused(tmp_path, no_checker):
    model = model_of(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 3, 100_000, 100_000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3, "h", "w"])],
    )
    with pytest.raises(ModelRejected, match=r"value 'x' of shape \[64x3x100000x100000\]"):
        inspect_model(save(model, tmp_path / "m.onnx"), max_tensor_bytes=2**30)


def test_constant_of_shape_with_a_huge_constant_shape_is_refused(tmp_path, no_checker):
    shape = numpy_helper.from_array(np.array([100_000, 100_000, 100], np.int64), "shape")
    model = model_of(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["big"], name="bomb"),
            helper.make_node("Add", ["x", "big"], ["y"]),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )
    with pytest.raises(ModelRejected, match="ConstantOfShape 'bomb'"):
        inspect_model(save(model, tmp_path / "m.onnx"), max_tensor_bytes=2**30)


def test_a_negative_dim_is_refused(tmp_path, no_checker):
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[-4, 2], float_data=[0.0] * 8)
    model = model_of(
        [helper.make_node("Identity", ["W"], ["y"])],
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight],
    )
    with pytest.raises(ModelRejected, match="negative dimension"):
        inspect_model(save(model, tmp_path / "m.onnx"))


def test_the_budget_is_per_tensor_and_ordinary_models_pass(tmp_path, tiny_model):
    # tiny_model's largest tensor is W: 16x8 float32 = 512 bytes.
    assert inspect_model(tiny_model, max_tensor_bytes=512).parameter_count == 16 * 8 + 8
    with pytest.raises(ModelRejected, match=r"tensor 'W' of shape \[16x8\]"):
        inspect_model(tiny_model, max_tensor_bytes=511)
    assert inspect_model(tiny_model).node_count == 3  # default budget: half of this machine


def test_a_negative_input_dim_is_dynamic_and_the_message_shows_the_declared_shape(
    tmp_path, no_checker
):
    model = model_of(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [-1, 3, 100_000, 100_000])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, 3, "h", "w"])],
    )
    with pytest.raises(ModelRejected, match=r"value 'x' of shape \[\?x3x100000x100000\]"):
        inspect_model(save(model, tmp_path / "m.onnx"), max_tensor_bytes=2**30)
