"""pipeline.json's LiteRT entries carry the .tflite's own tensor names and layouts (onnx2tf
writes `Identity...` outputs and channels-last images), beside the ONNX names they stand for."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from optistudio.core.backends import litert_convert
from optistudio.core.batching.pipeline_file import PipelineFile
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.report.bundle import BundleSource, write_bundle
from optistudio.core.report.litert_tensors import layout, tensor_entry

MISSING = litert_convert.missing_converter()


@pytest.mark.parametrize(
    ("tflite", "onnx_shape", "expected"),
    [
        ([1, 224, 224, 3], [1, 3, 224, 224], "channels_last"),
        ([None, 32, 3], ["n", 3, 32], "channels_last"),
        ([1, 3, 224, 224], [1, 3, 224, 224], "as_onnx"),
        ([None, 8], ["batch", 8], "as_onnx"),
        ([1, 10], [1, 3, 224, 224], None),
        ([1, 5, 7, 2], [1, 3, 224, 224], None),
    ],
    ids=["nchw-to-nhwc", "ncl-to-nlc", "same", "open-batch", "other-rank", "unrelated"],
)
def test_the_layout_is_read_against_the_onnx_dims(
    tflite: list, onnx_shape: list, expected: str | None
) -> None:
    assert layout(tflite, onnx_shape) == expected


def test_an_interpreter_detail_becomes_an_entry_with_its_onnx_name() -> None:
    """The dict is what ai_edge_litert's get_output_details() returns for one tensor."""
    detail = {
        "name": "Identity",
        "index": 7,
        "shape": np.array([1, 4, 4, 8], np.int32),
        "shape_signature": np.array([-1, 4, 4, 8], np.int32),
        "dtype": np.float32,
    }
    onnx_tensor = TensorSpec(name="logits", dtype="float32", shape=["batch", 8, 4, 4])

    entry = tensor_entry(detail, onnx_tensor)

    assert entry.model_dump() == {
        "name": "Identity",
        "dtype": "float32",
        "shape": [None, 4, 4, 8],
        "onnx_name": "logits",
        "layout": "channels_last",
    }


def conv_model(path: Path) -> Path:
    """x [1, 3, 8, 8] -> Conv(4 filters) -> Relu -> y [1, 4, 8, 8]: an NCHW image model."""
    rng = np.random.default_rng(0)
    weights = [
        onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "conv",
        [info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [info("y", TensorProto.FLOAT, [1, 4, 8, 8])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.extras
@pytest.mark.skipif(MISSING is not None, reason=f"needs the litert extra: {MISSING}")
def test_a_bundles_litert_entry_lists_the_tflite_names_and_nhwc_dims(tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter

    model = conv_model(tmp_path / "conv.onnx")
    source = BundleSource(
        name="conv",
        model_path=model,
        info=inspect_model(model),
        coreml_precisions=[],
        litert_precisions=["fp32"],
    )
    bundle = write_bundle(source, tmp_path / "b.zip").path
    with zipfile.ZipFile(bundle) as archive:
        document = PipelineFile.model_validate(json.loads(archive.read("pipeline.json")))
        path = archive.extract("litert/conv_fp32.tflite", tmp_path)

    assert document.litert is not None
    tensors = document.litert.tensors["fp32"]
    interpreter = Interpreter(model_path=path)
    assert [t.name for t in tensors.outputs] == [
        d["name"] for d in interpreter.get_output_details()
    ]
    assert [t.name for t in tensors.inputs] == [d["name"] for d in interpreter.get_input_details()]
    [image], [output] = tensors.inputs, tensors.outputs
    [given], [made] = interpreter.get_input_details(), interpreter.get_output_details()
    # whatever layout the converter chose (onnx2tf keeps NCHW on some graphs), the entry says
    # the .tflite's own dims and names the layout they are in against the ONNX ones
    assert (image.onnx_name, image.shape[1:]) == ("x", list(given["shape"][1:]))
    assert (output.onnx_name, output.shape[1:]) == ("y", list(made["shape"][1:]))
    for entry, onnx_dims in ((image, [3, 8, 8]), (output, [4, 8, 8])):
        expected = "as_onnx" if entry.shape[1:] == onnx_dims else "channels_last"
        assert entry.layout == expected
        assert sorted(entry.shape[1:]) == sorted(onnx_dims)
