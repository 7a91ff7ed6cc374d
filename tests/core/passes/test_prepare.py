"""Graphs exporters write that ONNX Runtime's quantizer choked on, through the INT8 passes.

Each graph is built the way its exporter writes it: tf2onnx's NHWC convolution (Transposes with a
perm around the Conv, the weight itself behind a Transpose), keras2onnx's Dense at IR 3 (MatMul +
bias Add, every weight also a graph input), and an already-QDQ file (ONNX Runtime's own QDQ
output, whose nodes are partly unnamed) quantized again.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from optistudio.core.passes.base import PassContext
from optistudio.core.passes.prepare import (
    GraphNotApplicable,
    finish_quantized,
    prepare_for_quantizer,
    unique_node_names,
    weights_out_of_inputs,
)
from optistudio.core.passes.quantize import (
    Int8DynamicConfig,
    Int8StaticConfig,
    run_int8_dynamic,
    run_int8_static,
)
from tests.core.passes.exporter_graphs import (
    Batches,
    already_qdq,
    custom_op_model,
    keras2onnx_dense,
    tf2onnx_nhwc_conv,
)


def _outputs(model: Path, feeds: dict[str, np.ndarray]) -> np.ndarray:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return np.asarray(session.run(None, feeds)[0])


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.ravel(), b.ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _quantize(kind: str, model: Path, tmp_path: Path, shapes: dict[str, tuple[int, ...]]):
    out = tmp_path / f"{kind}.onnx"
    context = PassContext(work_dir=tmp_path / f"work-{kind}", calibration=Batches(shapes))
    if kind == "static":
        return run_int8_static(model, out, Int8StaticConfig(), context)
    return run_int8_dynamic(model, out, Int8DynamicConfig(), context)


def _check_runs_close(original: Path, quantized: Path, shapes: dict[str, tuple[int, ...]]):
    feeds = next(iter(Batches(shapes, count=1).batches()))
    assert _cosine(_outputs(original, feeds), _outputs(quantized, feeds)) > 0.95
    names = [node.name for node in onnx.load(quantized).graph.node]
    assert all(names) and len(set(names)) == len(names)


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_tf2onnx_transposes_quantize_and_load(tmp_path: Path, kind: str) -> None:
    model, shapes = tf2onnx_nhwc_conv(tmp_path / "tf2onnx.onnx")

    report = _quantize(kind, model, tmp_path, shapes)

    assert report.details["preprocessed"] is True
    _check_runs_close(model, report.output, shapes)
    quantized = Counter(node.op_type for node in onnx.load(report.output).graph.node)
    assert quantized["ConvInteger" if kind == "dynamic" else "DequantizeLinear"] >= 1


def test_dynamic_int8_without_preparation_is_not_applicable_to_a_tf2onnx_weight(
    tmp_path: Path,
) -> None:
    """What preparation fixes: ORT's dynamic quantizer wants the Conv weight an initializer;
    refused, the recipe does not apply to this graph (ORT's sentence), it is not a bug."""
    model, shapes = tf2onnx_nhwc_conv(tmp_path / "tf2onnx.onnx")
    context = PassContext(work_dir=tmp_path / "work", calibration=Batches(shapes))

    with pytest.raises(GraphNotApplicable, match="to be an initializer"):
        run_int8_dynamic(model, tmp_path / "q.onnx", Int8DynamicConfig(preprocess=False), context)


@pytest.mark.parametrize("as_inputs", [True, False], ids=["weights-as-inputs", "ir3-weights"])
@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_keras2onnx_bias_dense_at_ir3_quantizes_and_loads(
    tmp_path: Path, kind: str, as_inputs: bool
) -> None:
    model = keras2onnx_dense(tmp_path / "keras.onnx", weights_as_inputs=as_inputs)
    shapes = {"x": (2, 16)}

    report = _quantize(kind, model, tmp_path, shapes)

    _check_runs_close(model, report.output, shapes)
    assert any("IR version 3 to 4" in warning for warning in report.warnings)
    inputs = [value.name for value in onnx.load(report.output).graph.input]
    assert inputs == ["x"]


@pytest.mark.parametrize("kind", ["static", "dynamic"])
def test_an_already_qdq_file_quantizes_again_without_repeated_names(
    tmp_path: Path, kind: str
) -> None:
    model, shapes = already_qdq(tmp_path / "qdq.onnx")
    assert "" in {node.name for node in onnx.load(model).graph.node}

    report = _quantize(kind, model, tmp_path, shapes)

    _check_runs_close(model, report.output, shapes)


def test_unique_node_names_keeps_unique_names_and_renames_the_rest() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["a"], name="dense"),
            helper.make_node("Relu", ["a"], ["b"], name="dense"),
            helper.make_node("Relu", ["b"], ["c"]),
            helper.make_node("Relu", ["c"], ["y"], name="Relu_2"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )

    renamed = unique_node_names(graph)

    names = [node.name for node in graph.node]
    assert renamed == 2
    assert names[0] == "dense" and names[3] == "Relu_2"
    assert all(names) and len(set(names)) == 4


def test_weights_leave_the_inputs_and_the_ir_version_rises(tmp_path: Path) -> None:
    proto = onnx.load(keras2onnx_dense(tmp_path / "k.onnx", weights_as_inputs=True))

    assert weights_out_of_inputs(proto) == 4
    assert [value.name for value in proto.graph.input] == ["x"]


def test_a_failed_preprocessing_keeps_the_graph_as_it_is_with_a_note(tmp_path: Path) -> None:
    model = custom_op_model(tmp_path / "m.onnx", named=False)

    prepared = prepare_for_quantizer(model, tmp_path / "work")

    assert prepared.notes[0] == "Named 1 unnamed or repeated node(s) for the quantizer."
    assert prepared.notes[1].startswith("Pre-processing failed (")
    assert "symbolic shape inference" in prepared.notes[1]
    assert prepared.path == tmp_path / "work" / "named.onnx"
    assert [path.name for path in (tmp_path / "work").iterdir()] == ["named.onnx"]


def test_a_quantized_graph_onnx_runtime_cannot_load_is_not_applicable(tmp_path: Path) -> None:
    broken = custom_op_model(tmp_path / "out.onnx")

    with pytest.raises(GraphNotApplicable, match="Not applicable to this graph") as caught:
        finish_quantized(broken, "static INT8")
    assert "NoSuchOp" in caught.value.message
