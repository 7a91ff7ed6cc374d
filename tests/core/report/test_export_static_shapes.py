"""The export's second try at the job's static shapes: a graph whose sizes feed an op the Core ML
route lacks (Shape -> Gather -> Range) converts once the input is static and the sizes folded;
a graph that needs the op on its data is refused with both reasons."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.model.intake import inspect_model
from optistudio.core.report import coreml
from optistudio.core.report.bundle import BundleSource, read_manifest, write_bundle
from optistudio.core.report.static_shapes import profile_shapes, static_copy

PROFILE = {"shapes": {"x": [1, 3, 6]}}


def _ranged_model(path: Path, *, on_data: bool = False) -> Path:
    """y = x + range(0, x.shape[2]) (the sizes feed Range), or with `on_data` a Range whose end
    is x's first value: the op runs on the data, which no static shape folds away."""
    zero, one, two = (numpy_helper.from_array(np.array(v, np.int64), n) for v, n in
                      ((0, "zero"), (1, "one"), (2, "two")))  # fmt: skip
    if on_data:
        nodes = [
            helper.make_node("ReduceMax", ["x"], ["peak"], keepdims=0),
            helper.make_node("Cast", ["peak"], ["end"], to=TensorProto.INT64),
        ]
    else:
        nodes = [
            helper.make_node("Shape", ["x"], ["size"]),
            helper.make_node("Gather", ["size", "two"], ["end"], axis=0),
        ]
    nodes += [
        helper.make_node("Range", ["zero", "end", "one"], ["steps"]),
        helper.make_node("Cast", ["steps"], ["ramp"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "ramp"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "ranged",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "steps"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, "steps"])],
        [zero, one, two],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.save(model, str(path))
    return path


def test_the_static_copy_folds_the_sizes_and_agrees(tmp_path: Path) -> None:
    model = _ranged_model(tmp_path / "ranged.onnx")
    info = inspect_model(model)
    shapes = profile_shapes(info, PROFILE)

    copy = static_copy(model, info, shapes, tmp_path / "static.onnx")

    ops = {node.op_type for node in onnx.load(str(copy)).graph.node}
    assert shapes == {"x": [1, 3, 6]}
    assert "Range" not in ops and "Shape" not in ops
    x = np.random.default_rng(0).normal(size=(1, 3, 6)).astype(np.float32)
    (y,) = ort.InferenceSession(str(copy)).run(None, {"x": x})
    np.testing.assert_allclose(y, x + np.arange(6, dtype=np.float32))


@pytest.mark.extras
def test_core_ml_converts_the_static_copy_and_the_bundle_says_so(tmp_path: Path) -> None:
    if absent := coreml.missing():
        pytest.skip(absent)
    model = _ranged_model(tmp_path / "ranged.onnx")
    info = inspect_model(model)

    made = coreml.export_coreml(model, info, tmp_path / "out", name="r", input_profile=PROFILE,
                                precisions=["fp32"])  # fmt: skip
    bundle = write_bundle(
        BundleSource(name="r", model_path=model, info=info, input_profile=PROFILE,
                     coreml_precisions=["fp32"]),
        tmp_path / "r.zip",
    )  # fmt: skip

    assert made.skipped == {} and [p.precision for p in made.packages] == ["fp32"]
    assert made.static_shapes.startswith("traced from the model at the static shapes x=[1, 3, 6]")
    assert "Range" in made.static_shapes  # the dynamic graph's reason, kept
    with zipfile.ZipFile(bundle.path) as archive:
        assert "the static shapes x=[1, 3, 6]" in archive.read("pipeline.json").decode()
    manifest = read_manifest(bundle.path)
    assert manifest["static_shapes"] == {"coreml": made.static_shapes}
    assert "coreml" not in manifest["skipped"]


@pytest.mark.extras
def test_an_op_on_the_data_is_refused_with_both_reasons(tmp_path: Path) -> None:
    if absent := coreml.missing():
        pytest.skip(absent)
    model = _ranged_model(tmp_path / "ranged.onnx", on_data=True)

    made = coreml.export_coreml(model, inspect_model(model), tmp_path / "out", name="r",
                                input_profile=PROFILE, precisions=["fp32"])  # fmt: skip

    assert made.packages == [] and made.static_shapes == ""
    reason = made.skipped["fp32"]
    assert "Range" in reason and "At the static shapes x=[1, 3, 6]: " in reason
