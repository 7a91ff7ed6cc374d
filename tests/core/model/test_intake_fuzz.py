"""Fuzzing the model intake: mutated ONNX files never crash it; each gets a clear refusal.

Every example is a real .onnx file (a small CNN, an MLP with a subgraph, one with external data)
damaged one way: bit flips, truncation, overwritten or inserted bytes, a random protobuf field
appended, or a structural edit of the parsed model (dims, dtypes, op types, attributes, external
data entries). The property: `inspect_model` returns a model card or raises ModelRejected with a
message; any other exception (or a crash of the process) is a bug. The profile is derandomized,
so CI runs the same examples every time; OPTISTUDIO_FUZZ_EXAMPLES raises the count locally.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.errors import ModelRejected
from optistudio.core.model.intake import inspect_model

EXAMPLES = int(os.environ.get("OPTISTUDIO_FUZZ_EXAMPLES", "800"))
FUZZ = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def mlp_with_branch() -> onnx.ModelProto:
    """MatMul + an If whose branches hold Constant tensors, so subgraph code paths are reached."""
    weight = numpy_helper.from_array(np.ones((8, 4), np.float32), "W")
    shape = numpy_helper.from_array(np.array([2, 4], np.int64), "shape")

    def branch(value: float) -> onnx.GraphProto:
        constant = numpy_helper.from_array(np.full(4, value, np.float32))
        return helper.make_graph(
            [helper.make_node("Constant", [], ["k"], value=constant)],
            f"branch{value}",
            [],
            [helper.make_tensor_value_info("k", TensorProto.FLOAT, [4])],
        )

    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("ReduceSum", ["h"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["positive"]),
        helper.make_node(
            "If", ["positive"], ["k"], then_branch=branch(1.0), else_branch=branch(0.0)
        ),
        helper.make_node("Add", ["h", "k"], ["a"]),
        helper.make_node("ConstantOfShape", ["shape"], ["z"]),
        helper.make_node("Mul", ["a", "z"], ["y"]),
    ]
    zero = numpy_helper.from_array(np.array(0.0, np.float32), "zero")
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        initializer=[weight, zero, shape],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


SEEDS = {"cnn": cnn(), "mlp": mlp_with_branch()}


@pytest.fixture(scope="module")
def seed_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("seeds")
    files = {}
    for name, model in SEEDS.items():
        files[name] = folder / f"{name}.onnx"
        onnx.save(model, files[name])
        assert inspect_model(files[name]).node_count > 0  # the seeds themselves are accepted
    external = folder / "external" / "ext.onnx"
    external.parent.mkdir()
    onnx.save(cnn(), external, save_as_external_data=True, location="w.bin", size_threshold=0)
    files["external"] = external
    assert inspect_model(external).external_data
    return files


def assert_clear_outcome(path: Path) -> None:
    """Accepted, or refused with a message; `--hypothesis-show-statistics` shows the mix."""
    try:
        inspect_model(path, max_tensor_bytes=2**30)
    except ModelRejected as exc:
        assert exc.message.strip(), "a refusal must say why"
        assert "Traceback" not in str(exc)
        event(f"refused: {exc.message[:36]}")
    else:
        event("accepted")


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


@st.composite
def byte_mutation(draw: st.DrawFn, data: bytes) -> bytes:
    kind = draw(st.sampled_from(["flip", "truncate", "overwrite", "insert", "field"]))
    position = draw(st.integers(0, len(data) - 1))
    if kind == "flip":
        flipped = bytearray(data)
        for offset in draw(st.lists(st.integers(0, len(data) - 1), min_size=1, max_size=8)):
            flipped[offset] ^= 1 << draw(st.integers(0, 7))
        return bytes(flipped)
    if kind == "truncate":
        return data[:position]
    chunk = draw(st.binary(min_size=1, max_size=64))
    if kind == "overwrite":
        return data[:position] + chunk + data[position + len(chunk) :]
    if kind == "insert":
        return data[:position] + chunk + data[position:]
    field = draw(st.integers(1, 2**29 - 1))
    wire = draw(st.sampled_from([0, 1, 2, 5]))
    payload = {
        0: varint(draw(st.integers(0, 2**64 - 1))),
        1: draw(st.binary(min_size=8, max_size=8)),
        2: varint(len(chunk)) + chunk,
        5: draw(st.binary(min_size=4, max_size=4)),
    }[wire]
    return data + varint(field << 3 | wire) + payload


@st.composite
def structural_mutation(draw: st.DrawFn, model: onnx.ModelProto) -> onnx.ModelProto:
    """One edit of the parsed model that keeps it a valid protobuf."""
    mutated = onnx.ModelProto()
    mutated.CopyFrom(model)
    graph = mutated.graph
    numbers = st.integers(-(2**40), 2**62)
    kind = draw(
        st.sampled_from(
            ["dim", "dtype", "op", "attribute", "external", "opset", "ir", "drop_node", "io"]
        )
    )
    if kind == "dim" and graph.initializer:
        tensor = graph.initializer[draw(st.integers(0, len(graph.initializer) - 1))]
        tensor.dims[:] = draw(st.lists(numbers, max_size=5))
    elif kind == "dtype" and graph.initializer:
        graph.initializer[0].data_type = draw(st.integers(-5, 40))
    elif kind == "op":
        node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
        node.op_type = draw(st.sampled_from(["", "Loop", "Scan", "If", "Conv", "Mystery"]))
        node.domain = draw(st.sampled_from(["", "ai.onnx.ml", "com.microsoft", "x.y"]))
    elif kind == "attribute":
        node = graph.node[draw(st.integers(0, len(graph.node) - 1))]
        attr = node.attribute.add(name=draw(st.sampled_from(["pads", "axis", "value", "x"])))
        attr.type = draw(st.integers(0, 14))
        attr.i = draw(numbers)
        attr.ints.extend(draw(st.lists(numbers, max_size=4)))
    elif kind == "external" and graph.initializer:
        tensor = graph.initializer[0]
        tensor.ClearField("raw_data")
        tensor.data_location = TensorProto.EXTERNAL
        for key in draw(
            st.lists(st.sampled_from(["location", "offset", "length", "x"]), max_size=4)
        ):
            value = draw(
                st.sampled_from(["w.bin", "../w.bin", "/etc/passwd", "", "C:\\x", "-1", "9" * 30])
            )
            tensor.external_data.add(key=key, value=value)
    elif kind == "opset":
        mutated.opset_import[0].version = draw(st.integers(-3, 10_000))
    elif kind == "ir":
        mutated.ir_version = draw(st.integers(-3, 10_000))
    elif kind == "drop_node":
        del graph.node[draw(st.integers(0, len(graph.node) - 1))]
    else:
        value = graph.input[0] if draw(st.booleans()) else graph.output[0]
        dims = value.type.tensor_type.shape.dim
        if dims:
            dims[draw(st.integers(0, len(dims) - 1))].dim_value = draw(numbers)
        value.type.tensor_type.elem_type = draw(st.integers(0, 30))
    return mutated


@FUZZ
@given(data=st.data(), seed=st.sampled_from(sorted(SEEDS)))
def test_damaged_bytes_get_a_clear_refusal(tmp_path: Path, seed_files, data, seed: str) -> None:
    original = seed_files[seed].read_bytes()
    path = tmp_path / "fuzz.onnx"
    path.write_bytes(data.draw(byte_mutation(original)))
    assert_clear_outcome(path)


@FUZZ
@given(data=st.data(), seed=st.sampled_from(sorted(SEEDS)))
def test_structural_edits_get_a_clear_refusal(tmp_path: Path, seed_files, data, seed: str) -> None:
    path = tmp_path / "fuzz.onnx"
    path.write_bytes(data.draw(structural_mutation(SEEDS[seed])).SerializeToString())
    assert_clear_outcome(path)


@FUZZ
@given(data=st.data())
def test_damaged_external_data_models_stay_confined(seed_files, data) -> None:
    """External-data edits on a model beside its real data file: refused or accepted, and never
    a read outside the model's folder."""
    source = seed_files["external"]
    model = onnx.load(str(source), load_external_data=False)
    folder = source.parent
    mutated = data.draw(structural_mutation(model))
    path = folder / "mutated.onnx"
    path.write_bytes(mutated.SerializeToString())
    try:
        assert_clear_outcome(path)
    finally:
        path.unlink()


def test_a_name_that_is_not_utf8_is_refused_not_a_crash(tmp_path: Path) -> None:
    """Found by the fuzzer: the checker's error quoted a non-UTF-8 name and raised
    UnicodeDecodeError instead of ValidationError."""
    model = cnn()
    model.graph.node[0].input[0] = "@"  # a dangling input, so the checker will complain
    data = model.SerializeToString()
    assert data.count(b"\n\x01@") == 1
    path = tmp_path / "bad_utf8.onnx"
    path.write_bytes(data.replace(b"\n\x01@", b"\n\x01\x80"))

    with pytest.raises(ModelRejected, match="not valid UTF-8"):
        inspect_model(path)
