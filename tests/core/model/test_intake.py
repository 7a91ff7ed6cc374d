from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.errors import ModelRejected
from optistudio.core.model.intake import inspect_model, store_model


def conv_model(opset: int = 17) -> onnx.ModelProto:
    """x[batch,3,8,8] -> Conv(4, 3x3) -> Relu -> Add(const) -> Relu -> y; 108+4+2 parameters."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(np.zeros(4, dtype=np.float32), "b")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node(
            "Constant", [], ["k2"], value=numpy_helper.from_array(np.ones(2, np.float32))
        ),
        helper.make_node("ReduceMax", ["k2"], ["kmax"], keepdims=0),
        helper.make_node("Add", ["r", "kmax"], ["a"]),
        helper.make_node("Relu", ["a"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "conv_graph",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4, 8, 8])],
        initializer=[weight, bias],
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset)],
        ir_version=8,
        producer_name="tests",
        producer_version="1.0",
    )


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def with_external_location(model: onnx.ModelProto, location: str) -> onnx.ModelProto:
    """The model with weight 'w' marked as stored externally at `location` (no data written)."""
    weight = model.graph.initializer[0]
    weight.ClearField("raw_data")
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    weight.external_data.add(key="location", value=location)
    return model


def write_bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def save_beside_secret(path: Path, location: str) -> Path:
    """A model in its own folder whose external data points at a real file one level up."""
    (path.parent / "secret.bin").write_bytes(b"\0" * 1024)
    folder = path.parent / "upload"
    folder.mkdir()
    return save(with_external_location(conv_model(), location), folder / path.name)


def valid_bytes() -> bytes:
    return conv_model().SerializeToString()


REJECTIONS = [
    pytest.param(
        lambda p: write_bytes(p, b"hello, I am a text file\n" * 4), "text file", id="text-file"
    ),
    pytest.param(
        lambda p: write_bytes(p, b"\x89PNG\r\n\x1a\n" + bytes(range(200))), "PNG", id="png-header"
    ),
    pytest.param(lambda p: write_bytes(p, b""), "empty (0 bytes)", id="empty-file"),
    pytest.param(lambda p: p, "No model file", id="missing-file"),
    pytest.param(
        lambda p: write_bytes(p, valid_bytes()[: len(valid_bytes()) // 2]),
        "truncated",
        id="truncated",
    ),
    pytest.param(
        lambda p: save(with_external_location(conv_model(), "../../etc/passwd"), p),
        "outside the model's folder",
        id="ext-data-traversal",
    ),
    pytest.param(
        lambda p: save_beside_secret(p, "../secret.bin"),
        "outside the model's folder",
        id="ext-data-traversal-to-existing-file",
    ),
    pytest.param(
        lambda p: save(with_external_location(conv_model(), "/etc/passwd"), p),
        "absolute path",
        id="ext-data-absolute",
    ),
    pytest.param(
        lambda p: save(with_external_location(conv_model(), "weights.bin"), p),
        "missing next to the model: weights.bin",
        id="ext-data-missing",
    ),
    pytest.param(
        lambda p: save(
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
            p,
        ),
        "checker rejected the model",
        id="checker-undefined-input",
    ),
]


@pytest.mark.parametrize(("make_file", "expected"), REJECTIONS)
def test_rejected_file_names_the_problem(tmp_path: Path, make_file, expected: str) -> None:
    path = make_file(tmp_path / "model.onnx")

    with pytest.raises(ModelRejected) as caught:
        inspect_model(path)

    assert expected in caught.value.message
    assert caught.value.hint


def test_rejection_keeps_only_the_checkers_first_line(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x", "x"], ["y"])],  # the checker adds lines of context
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    path = save(
        helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "m.onnx",
    )

    with pytest.raises(ModelRejected) as caught:
        inspect_model(path)

    assert "Relu:14) has input size 2" in caught.value.message
    assert "\n" not in caught.value.message


def test_over_size_limit_states_size_limit_and_env_var(tmp_path: Path) -> None:
    path = save(conv_model(), tmp_path / "model.onnx")

    with pytest.raises(ModelRejected) as caught:
        inspect_model(path, max_bytes=100)

    message = str(caught.value)
    assert f"{path.stat().st_size:,} bytes" in message
    assert "over the 100 bytes limit" in message
    assert "OPTISTUDIO_MAX_UPLOAD_MB" in message


def test_card_of_valid_model(tmp_path: Path) -> None:
    path = save(conv_model(), tmp_path / "model.onnx")

    info = inspect_model(path)

    assert info.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info.size_bytes == path.stat().st_size
    assert info.opsets == {"": 17}
    assert info.producer == "tests 1.0"
    assert info.graph_name == "conv_graph"
    assert [(t.name, t.dtype, t.shape) for t in info.inputs] == [
        ("x", "float32", ["batch", 3, 8, 8])
    ]
    assert [(t.name, t.shape) for t in info.outputs] == [("y", ["batch", 4, 8, 8])]
    assert info.op_histogram == {"Relu": 2, "Add": 1, "Constant": 1, "Conv": 1, "ReduceMax": 1}
    assert list(info.op_histogram)[0] == "Relu"
    assert info.node_count == 6
    assert info.parameter_count == 4 * 3 * 3 * 3 + 4 + 2
    assert info.flops_estimate == 2 * (4 * 8 * 8) * (3 * 3 * 3)
    assert info.external_data is False
    assert "dynamic dims ['batch'] on input x" in info.warnings


@pytest.mark.parametrize(
    ("opset", "warned"),
    [
        pytest.param(6, True, id="opset-6-older-than-ort-runs"),
        pytest.param(9, False, id="opset-9-ort-runs-it"),
        pytest.param(17, False, id="opset-17-current"),
    ],
)
def test_only_an_opset_onnx_runtime_cannot_run_is_warned(
    tmp_path: Path, opset: int, warned: bool
) -> None:
    path = save(conv_model(opset=opset), tmp_path / "model.onnx")

    info = inspect_model(path)

    said = [w for w in info.warnings if f"opset {opset}" in w]
    assert bool(said) is warned
    assert not [w for w in info.warnings if "may need conversion" in w]
    if warned:
        assert "older than ONNX Runtime runs (7 and newer)" in said[0]


def test_initializers_listed_as_inputs_are_not_inputs(tmp_path: Path) -> None:
    model = conv_model()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3]))
    path = save(model, tmp_path / "model.onnx")

    info = inspect_model(path)

    assert [spec.name for spec in info.inputs] == ["x"]


def test_custom_domain_ops_are_prefixed(tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("FusedConv", ["x"], ["y"], domain="com.microsoft")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    path = save(helper.make_model(graph, ir_version=8, opset_imports=opsets), tmp_path / "m.onnx")

    info = inspect_model(path)

    assert info.op_histogram == {"com.microsoft.FusedConv": 1}
    assert info.opsets == {"": 17, "com.microsoft": 1}


def test_no_inputs_is_warned(tmp_path: Path) -> None:
    const = numpy_helper.from_array(np.ones(3, np.float32))
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["y"], value=const)],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
    )
    path = save(
        helper.make_model(graph, ir_version=8, opset_imports=[helper.make_opsetid("", 17)]),
        tmp_path / "m.onnx",
    )

    info = inspect_model(path)

    assert info.inputs == []
    assert any("no inputs" in w for w in info.warnings)


def save_with_external_data(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save(
        conv_model(), path, save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    return path


def test_external_data_model_is_accepted(tmp_path: Path) -> None:
    path = save_with_external_data(tmp_path / "upload")

    info = inspect_model(path)

    assert info.external_data is True
    assert info.size_bytes == path.stat().st_size + (path.parent / "weights.bin").stat().st_size
    assert info.parameter_count == 4 * 3 * 3 * 3 + 4 + 2


def test_size_limit_counts_external_data(tmp_path: Path) -> None:
    path = save_with_external_data(tmp_path / "upload")

    with pytest.raises(ModelRejected, match="limit"):
        inspect_model(path, max_bytes=path.stat().st_size + 100)


def test_truncated_external_data_is_rejected(tmp_path: Path) -> None:
    path = save_with_external_data(tmp_path / "upload")
    weights = path.parent / "weights.bin"
    weights.write_bytes(weights.read_bytes()[:10])

    with pytest.raises(ModelRejected, match="too short"):
        inspect_model(path)


def test_store_twice_gives_one_file(tmp_path: Path) -> None:
    source = save(conv_model(), tmp_path / "upload.onnx")
    artifacts = tmp_path / "artifacts"

    first = store_model(source, artifact_dir=artifacts)
    inode = first.path.stat().st_ino
    second = store_model(source, artifact_dir=artifacts)

    sha = first.info.sha256
    assert first.path == second.path == artifacts / "models" / sha[:2] / sha / "model.onnx"
    assert [p for p in artifacts.rglob("*") if p.is_file()] == [first.path]
    assert first.path.read_bytes() == source.read_bytes()
    assert second.path.stat().st_ino == inode, "the existing copy should be kept, not rewritten"


def test_store_copies_external_data_and_runs(tmp_path: Path) -> None:
    source = save_with_external_data(tmp_path / "upload")

    stored = store_model(source, artifact_dir=tmp_path / "artifacts")

    assert (stored.path.parent / "weights.bin").read_bytes() == (
        source.parent / "weights.bin"
    ).read_bytes()
    session = ort.InferenceSession(str(stored.path), providers=["CPUExecutionProvider"])
    (output,) = session.run(None, {"x": np.zeros((2, 3, 8, 8), np.float32)})
    assert output.shape == (2, 4, 8, 8)


def test_rejected_model_is_not_stored(tmp_path: Path) -> None:
    source = write_bytes(tmp_path / "upload.onnx", b"not a model at all")
    artifacts = tmp_path / "artifacts"

    with pytest.raises(ModelRejected):
        store_model(source, artifact_dir=artifacts)

    assert not artifacts.exists() or not any(artifacts.rglob("*"))
