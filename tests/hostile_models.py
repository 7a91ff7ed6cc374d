"""Hostile and odd uploads, built in code (issue 39): files that try to exhaust the machine or
read outside their folder. Nothing here is committed as a binary.

- `sparse_weight_model`: y = W, with W's float32 data in a sparse external file (no disk
  used): ONNX Runtime maps it, so a load grows the address space by that much.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto, helper


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
