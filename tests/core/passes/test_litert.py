"""The LiteRT conversions: which recipes Auto offers for target litert (no extra needed), and
with the extra (`make test-extras`) every precision converted and run against ONNX Runtime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends import SessionOptions, get_backend, litert_convert
from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.errors import PassFailed
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.recipes import any_backend_candidates, resolve_recipes
from optistudio.core.passes.base import PassContext, passes
from optistudio.core.passes.litert import open_dims_from

MISSING = litert_convert.missing_converter()
needs_extra = pytest.mark.skipif(
    MISSING is not None or get_backend("litert").availability().ok is False,
    reason=f"needs the litert extra (pip install 'optistudio[litert]'): {MISSING}",
)


def conv_model(
    path: Path, *, batch: int | str = "N", width: int | str = 16, channels: int = 4
) -> Path:
    """y = relu(conv3x3(x)) -> global average pool -> [N, channels]: a tiny CNN."""
    rng = np.random.default_rng(0)
    kernel = rng.standard_normal((channels, 3, 3, 3)).astype(np.float32) / 3
    weights = [
        numpy_helper.from_array(kernel, "W"),
        numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "B"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 16, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, channels])],
        initializer=weights,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def names(recipes: list) -> list[str]:
    return [recipe.name for recipe in recipes]


def test_auto_for_litert_offers_fp32_and_calibrated_int8_for_a_cnn(tmp_path: Path) -> None:
    info = inspect_model(conv_model(tmp_path / "cnn.onnx"))

    chosen = resolve_recipes(["auto"], info, target_backend="litert")

    assert names(chosen)[:2] == ["litert_fp32", "litert_int8"]
    assert {recipe.backend for recipe in chosen} == {"litert"}


def test_auto_for_litert_offers_dynamic_int8_for_a_matmul_model(tiny_model: Path) -> None:
    chosen = resolve_recipes(["auto"], inspect_model(tiny_model), target_backend="litert")

    assert names(chosen)[:2] == ["litert_fp32", "litert_int8_dynamic"]


def test_auto_over_any_leaves_litert_to_its_own_target(tmp_path: Path) -> None:
    info = inspect_model(conv_model(tmp_path / "cnn.onnx"))

    chosen = any_backend_candidates(info, ["onnxruntime", "openvino", "litert"])

    assert all(recipe.backend != "litert" for recipe in chosen)


def test_a_named_litert_recipe_is_timed_on_litert_whatever_the_target(tiny_model: Path) -> None:
    chosen = resolve_recipes(
        ["litert_fp16"],
        inspect_model(tiny_model),
        target_backend="any",
        backends=["onnxruntime", "litert"],
    )

    assert [recipe.backend for recipe in chosen] == ["litert"]


def test_open_dims_past_the_batch_are_fixed_from_the_data(tmp_path: Path) -> None:
    model = conv_model(tmp_path / "cnn.onnx", batch=-1, width="W")
    data = SyntheticDataset(inspect_model(model).inputs, samples=2, shapes={"x": [1, 3, 16, 24]})

    assert open_dims_from(model, data) == {"x": [1, 3, 16, 24]}
    assert open_dims_from(conv_model(tmp_path / "fixed.onnx"), data) == {}


def test_full_integer_int8_without_data_fails_before_converting(
    tiny_model: Path, tmp_path: Path
) -> None:
    context = PassContext(work_dir=tmp_path)

    with pytest.raises(PassFailed, match="needs calibration data"):
        passes.get("litert_int8").run(tiny_model, tmp_path / "out.onnx", {}, context)


@pytest.mark.extras
@needs_extra
def test_every_precision_converts_in_one_run_and_agrees_with_onnxruntime(
    tmp_path: Path,
) -> None:
    # Paddle2ONNX's dim_value -1 batch; 48 x 27 weights: TFLite's dynamic range skips < 1024
    model = conv_model(tmp_path / "cnn.onnx", batch=-1, channels=48)
    rng = np.random.default_rng(1)
    samples = [{"x": rng.standard_normal((8, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    calibration = litert_convert.write_calibration(samples, tmp_path / "cal.npz")
    outs = {p: tmp_path / f"cnn-{p}.tflite" for p in litert_convert.PRECISIONS}
    feeds = {"x": rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}
    expected = get_backend("onnxruntime").load(model, SessionOptions()).run(feeds)[0]

    outcome = litert_convert.convert_many(model, outs, calibration=calibration)  # type: ignore[arg-type]

    tolerance = {"fp32": 1e-4, "fp16": 2e-2, "int8_dynamic": 0.1, "int8": 0.1}
    for precision, path in outs.items():
        assert outcome[precision]["ok"], outcome[precision]
        got = get_backend("litert").load(path, SessionOptions()).run(feeds)[0]
        assert got.shape == expected.shape == (2, 48)
        scale = float(np.abs(expected).max())
        assert np.abs(got - expected).max() <= tolerance[precision] * scale, precision
    assert int8_tensors(outs["fp32"]) == 0
    assert int8_tensors(outs["int8_dynamic"]) > 0
    assert int8_tensors(outs["int8"]) > int8_tensors(outs["int8_dynamic"])  # activations too


def int8_tensors(path: Path) -> int:
    from ai_edge_litert.interpreter import Interpreter

    details = Interpreter(model_path=str(path)).get_tensor_details()
    return sum(1 for d in details if d["dtype"] == np.int8)


@pytest.mark.extras
@needs_extra
def test_a_model_the_converter_cannot_take_is_a_failed_pass(tmp_path: Path) -> None:
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), tmp_path / "bad.onnx")

    with pytest.raises(PassFailed, match="could not convert this model to LiteRT"):
        passes.get("litert_fp32").run(
            tmp_path / "bad.onnx", tmp_path / "out.onnx", {}, PassContext(work_dir=tmp_path)
        )
