"""Hostile and odd uploads, built in code (issue 39): files that try to exhaust the machine or
read outside their folder. Nothing here is committed as a binary.

- `sparse_weight_model`: y = W, with W's float32 data in a sparse external file (no disk
  used): ONNX Runtime maps it, so a load grows the address space by that much.
- `tiny_bytes`, `external_bytes`, `many_nodes_bytes`: models as bytes, to upload or mutate.
- `zipped`, `genai_config`: a model's folder as a .zip, symlink members included.
"""

from __future__ import annotations

import io
import json
import stat
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def sparse_weight_model(folder: Path, data_bytes: int) -> Path:
    """folder/big.onnx whose one initializer's `data_bytes` lie in the sparse file w.bin."""
    folder.mkdir(parents=True, exist_ok=True)
    count = data_bytes // 4
    weight = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[count])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(count * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["y"])],
        "big",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, folder / "big.onnx")
    with (folder / "w.bin").open("wb") as data:
        data.truncate(count * 4)
    return folder / "big.onnx"


# -- uploads as the studio receives them: (file name, bytes) ---------------------------------


def tiny_bytes(**metadata: str) -> bytes:
    """y = relu(x @ W + b), W and b in the file; `metadata` as its metadata_props."""
    weight = numpy_helper.from_array(np.arange(32, dtype=np.float32).reshape(4, 8), "W")
    bias = numpy_helper.from_array(np.ones(8, dtype=np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=[weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    helper.set_model_props(model, metadata)
    return model.SerializeToString()


def external_bytes(location: str, *, name: str = "W") -> tuple[bytes, bytes]:
    """(graph, data): a Relu of W + x whose W (4 floats of 1.0) is stored at `location`."""
    weight = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=[4])
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", "16")):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", name], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString(), np.ones(4, dtype=np.float32).tobytes()


def many_nodes_bytes(count: int) -> bytes:
    """A chain of `count` Identity nodes."""
    names = [f"t{i}" for i in range(count)] + ["y"]
    nodes = [
        helper.make_node("Identity", [names[i - 1] if i else "x"], [names[i]]) for i in range(count)
    ]
    nodes.append(helper.make_node("Identity", [names[count - 1]], ["y"]))
    graph = helper.make_graph(
        nodes,
        "many",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString()


def zipped(members: list[tuple[str, bytes]], *, links: dict[str, str] | None = None) -> bytes:
    """A .zip of `members` (name, bytes); `links` name -> target become symlink members."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members:
            archive.writestr(zipfile.ZipInfo(name), data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3  # Unix: the mode below is read
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def genai_config(filename: str) -> bytes:
    """A genai_config.json naming `filename` as the decoder's graph."""
    return json.dumps({"model": {"decoder": {"filename": filename}}}).encode()
