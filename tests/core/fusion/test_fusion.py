"""Fusion patterns: each fires on a tiny model (count, resulting graph, same outputs under ONNX
Runtime) and refuses a case it must not touch; plus the registry, ordering and the pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.errors import InvalidSpec, PassFailed, UnknownName
from optistudio.core.fusion import FusionPatternInfo, fusion_patterns
from optistudio.core.fusion.apply import FusionResult, apply_fusions, numerical_check
from optistudio.core.fusion.specs import BUILTIN_PATTERNS
from optistudio.core.passes.base import PassContext, passes

FLOAT = TensorProto.FLOAT
RNG = np.random.default_rng(0)


# --- tiny models -------------------------------------------------------------------------


def _model(nodes, inputs, outputs, initializers=(), elem_type=FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "tiny",
        [helper.make_tensor_value_info(name, elem_type, shape) for name, shape in inputs],
        [_value_info(output, elem_type) for output in outputs],
        [numpy_helper.from_array(array, name) for name, array in initializers],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model = onnx.shape_inference.infer_shapes(model)  # gives the outputs their shapes
    onnx.checker.check_model(model)
    return model


def _value_info(output: str | tuple[str, list[int]], elem_type: int) -> onnx.ValueInfoProto:
    name, shape = (output, None) if isinstance(output, str) else output
    return helper.make_tensor_value_info(name, elem_type, shape)


def _floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _conv_bn_model(conv_bias=True, constant_scale=True, training_mode=0) -> onnx.ModelProto:
    conv_inputs = ["x", "w", "cb"] if conv_bias else ["x", "w"]
    weights = [("w", _floats(4, 3, 3, 3)), ("cb", _floats(4))][: len(conv_inputs) - 1]
    stats = [("bias", _floats(4)), ("mean", _floats(4)), ("var", np.abs(_floats(4)) + 0.5)]
    scale = [("scale", _floats(4))] if constant_scale else []
    nodes = [
        helper.make_node("Conv", conv_inputs, ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(
            "BatchNormalization",
            ["c", "scale", "bias", "mean", "var"],
            ["y"],
            epsilon=1e-3,
            training_mode=training_mode,
        ),
    ]
    inputs = [("x", [1, 3, 8, 8])] + ([] if constant_scale else [("scale", [4])])
    return _model(nodes, inputs, [("y", [1, 4, 8, 8])], weights + scale + stats)


def _conv_act_model(activation: str, extra_consumer=False, clip_max_input=False, dtype=FLOAT):
    numpy_dtype = helper.tensor_dtype_to_np_dtype(dtype)
    bounds = [("lo", np.array(0.0, numpy_dtype))]
    if not clip_max_input:
        bounds.append(("hi", np.array(0.5, numpy_dtype)))
    act_inputs = ["c", "lo", "hi"] if activation == "Clip" else ["c"]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node(activation, act_inputs, ["y"]),
    ]
    outputs = ["y"]
    if extra_consumer:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"]))
        outputs.append("z")
    inputs = [("x", [1, 3, 8, 8])] + ([("hi", [])] if clip_max_input else [])
    weights = [
        ("w", _floats(4, 3, 3, 3).astype(numpy_dtype)),
        ("b", _floats(4).astype(numpy_dtype)),
    ]
    initializers = weights + (bounds if activation == "Clip" else [])
    return _model(nodes, inputs, outputs, initializers, elem_type=dtype)


def _matmul_add_model(a_shape, bias_first=False) -> onnx.ModelProto:
    add_inputs = ["bias", "p"] if bias_first else ["p", "bias"]
    nodes = [
        helper.make_node("MatMul", ["a", "b"], ["p"]),
        helper.make_node("Add", add_inputs, ["y"]),
    ]
    initializers = [("b", _floats(8, 3)), ("bias", _floats(3))]
    return _model(nodes, [("a", a_shape)], ["y"], initializers)


def _transposes_model(perm1, perm2, first_is_output=False) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t1"], perm=perm1),
        helper.make_node("Transpose", ["t1"], ["t2"], perm=perm2),
        helper.make_node("Relu", ["t2"], ["y"]),
    ]
    outputs = ["y", "t1"] if first_is_output else ["y"]
    return _model(nodes, [("x", [2, 3, 4, 5][: len(perm1)])], outputs)


def _reshapes_model(second_shape) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Reshape", ["x", "s1"], ["r"]),
        helper.make_node("Reshape", ["r", "s2"], ["y"]),
    ]
    shapes = [("s1", np.array([6, 4], np.int64)), ("s2", np.array(second_shape, np.int64))]
    return _model(nodes, [("x", [2, 3, 4])], ["y"], shapes)


# --- helpers -----------------------------------------------------------------------------


def _fuse(tmp_path: Path, model: onnx.ModelProto, names: list[str], target="onnxruntime"):
    source = tmp_path / "model.onnx"
    onnx.save(model, source)
    result = apply_fusions(source, tmp_path / "fused.onnx", names=names, target_backend=target)
    return source, result, onnx.load(result.output)


def _op_types(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def _feeds(model: onnx.ModelProto, dtype=np.float32) -> dict[str, np.ndarray]:
    initializers = {tensor.name for tensor in model.graph.initializer}
    return {
        value.name: RNG.standard_normal(
            [dim.dim_value for dim in value.type.tensor_type.shape.dim]
        ).astype(dtype)
        for value in model.graph.input
        if value.name not in initializers
    }


def _assert_same_outputs(source: Path, model: onnx.ModelProto, result: FusionResult) -> None:
    assert numerical_check(source, result.output, feeds=_feeds(model), atol=1e-4) <= 1e-4


# --- patterns that fire ------------------------------------------------------------------


@pytest.mark.parametrize("conv_bias", [True, False], ids=["conv-bias", "no-conv-bias"])
def test_conv_bn_folds_into_conv(tmp_path, conv_bias):
    model = _conv_bn_model(conv_bias=conv_bias)

    source, result, fused = _fuse(tmp_path, model, ["conv_bn"])

    assert result.matches == {"conv_bn": 1}
    assert _op_types(fused) == ["Conv"]
    assert len(fused.graph.node[0].input) == 3
    _assert_same_outputs(source, model, result)


@pytest.mark.parametrize(
    ("activation", "params"), [("Relu", None), ("Clip", [0.0, 0.5])], ids=["relu", "clip"]
)
def test_conv_activation_becomes_fused_conv(tmp_path, activation, params):
    model = _conv_act_model(activation)
    name = f"conv_{activation.lower()}"

    source, result, fused = _fuse(tmp_path, model, [name])

    assert result.matches == {name: 1}
    assert _op_types(fused) == ["FusedConv"]
    node = fused.graph.node[0]
    attributes = {attr.name: helper.get_attribute_value(attr) for attr in node.attribute}
    assert node.domain == "com.microsoft"
    assert attributes["activation"] == activation.encode()
    assert attributes.get("activation_params") == params
    assert attributes["strides"] == [2, 2]
    _assert_same_outputs(source, model, result)


@pytest.mark.parametrize("bias_first", [False, True], ids=["matmul-plus-bias", "bias-plus-matmul"])
def test_matmul_add_becomes_gemm(tmp_path, bias_first):
    model = _matmul_add_model([4, 8], bias_first=bias_first)

    source, result, fused = _fuse(tmp_path, model, ["matmul_add_gemm"])

    assert result.matches == {"matmul_add_gemm": 1}
    assert _op_types(fused) == ["Gemm"]
    _assert_same_outputs(source, model, result)


@pytest.mark.parametrize(
    ("perm1", "perm2", "expected_ops", "expected_perm"),
    [
        ([1, 0, 2], [0, 2, 1], ["Relu", "Transpose", "Relu"], [1, 2, 0]),
        ([0, 2, 3, 1], [0, 3, 1, 2], ["Relu", "Relu"], None),
    ],
    ids=["composed", "cancel-out"],
)
def test_transpose_transpose_composes(tmp_path, perm1, perm2, expected_ops, expected_perm):
    model = _transposes_model(perm1, perm2)

    source, result, fused = _fuse(tmp_path, model, ["transpose_transpose"])

    assert result.matches == {"transpose_transpose": 1}
    assert _op_types(fused) == expected_ops
    if expected_perm is not None:
        assert helper.get_attribute_value(fused.graph.node[1].attribute[0]) == expected_perm
    assert [output.name for output in fused.graph.output] == ["y"]
    _assert_same_outputs(source, model, result)


def test_transpose_pair_between_graph_input_and_output_keeps_an_identity(tmp_path):
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Transpose", ["t"], ["y"], perm=[1, 0]),
    ]
    model = _model(nodes, [("x", [2, 3])], ["y"])

    source, result, fused = _fuse(tmp_path, model, ["transpose_transpose"])

    assert result.matches == {"transpose_transpose": 1}
    assert _op_types(fused) == ["Identity"]
    assert [value.name for value in fused.graph.input] == ["x"]
    _assert_same_outputs(source, model, result)


def test_reshape_reshape_becomes_one_reshape(tmp_path):
    model = _reshapes_model([4, -1])

    source, result, fused = _fuse(tmp_path, model, ["reshape_reshape"])

    assert result.matches == {"reshape_reshape": 1}
    assert _op_types(fused) == ["Reshape"]
    assert fused.graph.node[0].input[0] == "x"
    _assert_same_outputs(source, model, result)


# --- cases where a pattern must not fire -------------------------------------------------


@pytest.mark.parametrize(
    ("name", "model", "reason"),
    [
        ("conv_bn", lambda: _conv_bn_model(constant_scale=False), "scale is not a constant"),
        ("conv_bn", lambda: _conv_bn_model(training_mode=1), "BatchNormalization in training"),
        (
            "conv_relu",
            lambda: _conv_act_model("Relu", dtype=TensorProto.DOUBLE),
            "float32 kernel only; this Conv is double",
        ),
        ("conv_clip", lambda: _conv_act_model("Clip", clip_max_input=True), "Clip max is not"),
        ("matmul_add_gemm", lambda: _matmul_add_model([2, 4, 8]), "A is 3-D"),
        ("reshape_reshape", lambda: _reshapes_model([0, 2, 2]), "second shape has a 0"),
    ],
    ids=["bn-scale-input", "bn-training", "conv-double", "clip-max-input", "3d-matmul", "zero"],
)
def test_check_refuses_with_a_reason(tmp_path, name, model, reason):
    original = model()

    _, result, fused = _fuse(tmp_path, original, [name])

    assert result.matches == {name: 0}
    assert _op_types(fused) == _op_types(original)
    assert any(reason in text for text in result.refused[name])


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("conv_relu", lambda: _conv_act_model("Relu", extra_consumer=True)),
        ("conv_clip", lambda: _conv_act_model("Clip", extra_consumer=True)),
        ("transpose_transpose", lambda: _transposes_model([1, 0, 2], [0, 2, 1], True)),
    ],
    ids=["conv-relu", "conv-clip", "transposes"],
)
def test_no_fusion_when_the_intermediate_has_other_consumers(tmp_path, name, model):
    original = model()

    _, result, fused = _fuse(tmp_path, original, [name])

    assert result.matches == {name: 0}
    assert _op_types(fused) == _op_types(original)


# --- registry, order, backends -----------------------------------------------------------


def test_registry_lists_the_builtins_with_descriptions():
    builtins = {info.name: info for info in BUILTIN_PATTERNS}

    assert set(builtins) <= set(fusion_patterns.names())
    for name, info in builtins.items():
        assert fusion_patterns.get(name) == info
        assert len(info.description) > 80 and info.backends


def test_pattern_info_rejects_unknown_fields():
    with pytest.raises(ValueError, match="extra"):
        FusionPatternInfo.model_validate({**BUILTIN_PATTERNS[0].model_dump(), "speedup": 2})


def test_unknown_pattern_lists_the_valid_names(tmp_path):
    with pytest.raises(UnknownName) as caught:
        _fuse(tmp_path, _conv_bn_model(), ["conv_bn", "conv_bm"])

    assert "conv_bm" in str(caught.value)
    assert "conv_bn" in str(caught.value) and "matmul_add_gemm" in str(caught.value)
    assert not (tmp_path / "fused.onnx").exists()


def test_a_pattern_listed_twice_is_refused(tmp_path):
    with pytest.raises(InvalidSpec, match="conv_bn"):
        _fuse(tmp_path, _conv_bn_model(), ["conv_bn", "conv_bn"])


def _conv_bn_relu_model() -> onnx.ModelProto:
    model = _conv_bn_model()
    model.graph.node[1].output[0] = "n"
    model.graph.node.append(helper.make_node("Relu", ["n"], ["y"]))
    return model


@pytest.mark.parametrize(
    ("names", "matches", "ops"),
    [
        (["conv_bn", "conv_relu"], {"conv_bn": 1, "conv_relu": 1}, ["FusedConv"]),
        (["conv_relu", "conv_bn"], {"conv_relu": 0, "conv_bn": 1}, ["Conv", "Relu"]),
    ],
    ids=["bn-first", "relu-first"],
)
def test_patterns_run_in_the_given_order(tmp_path, names, matches, ops):
    model = _conv_bn_relu_model()

    source, result, fused = _fuse(tmp_path, model, names)

    assert list(result.matches.items()) == list(matches.items())
    assert _op_types(fused) == ops
    _assert_same_outputs(source, model, result)


def test_backend_without_the_fused_kernel_skips_the_pattern(tmp_path):
    model = _conv_bn_relu_model()

    _, result, fused = _fuse(tmp_path, model, ["conv_bn", "conv_relu"], target="openvino")

    assert result.matches == {"conv_bn": 1}
    assert result.skipped == {"conv_relu": "no fused kernel on openvino"}
    assert _op_types(fused) == ["Conv", "Relu"]


def test_numerical_check_names_the_output_that_drifted(tmp_path):
    model = _matmul_add_model([4, 8])
    source, other = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(model, source)
    model.graph.initializer[1].CopyFrom(numpy_helper.from_array(_floats(3) + 1.0, "bias"))
    onnx.save(model, other)

    with pytest.raises(PassFailed, match="Output 'y' differs"):
        numerical_check(source, other, feeds=_feeds(model))


# --- the pass ----------------------------------------------------------------------------


def test_fusion_pass_reports_matches_and_the_output_difference(tmp_path):
    source = tmp_path / "model.onnx"
    onnx.save(_conv_bn_relu_model(), source)
    fusion = passes.get("fusion")

    report = fusion.run(
        source, tmp_path / "fused.onnx", {"patterns": None}, PassContext(work_dir=tmp_path)
    )

    assert report.details["matches"]["conv_bn"] == 1
    assert report.details["matches"]["conv_relu"] == 1
    assert report.details["skipped"] == {}
    assert 0 <= report.details["max_abs_diff"] <= 1e-4
    assert _op_types(onnx.load(report.output)) == ["FusedConv"]


def test_fusion_pass_on_openvino_skips_onnxruntime_only_patterns(tmp_path):
    source = tmp_path / "model.onnx"
    onnx.save(_conv_bn_relu_model(), source)
    context = PassContext(work_dir=tmp_path, target_backend="openvino")

    report = passes.get("fusion").run(source, tmp_path / "fused.onnx", {}, context)

    assert report.details["skipped"]["conv_relu"] == "no fused kernel on openvino"
    assert "conv_relu" not in report.details["matches"]
    assert _op_types(onnx.load(report.output)) == ["Conv", "Relu"]


def test_fusion_config_rejects_a_misspelt_option():
    with pytest.raises(ValueError, match="pattern"):
        passes.get("fusion").config_class().model_validate({"pattern": ["conv_bn"]})
