"""The weight-only passes on the tiny decoder (tests/decoder_models.py), and their refusal."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from decoder_models import build_tiny_decoder

from optistudio.core.errors import ModelRejected
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.weight_only import WEIGHT_ONLY


def test_the_pass_writes_a_4_bit_decoder(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path / "fp32")
    out = tmp_path / "int4" / "model.onnx"

    report = WEIGHT_ONLY.run(model, out, {"bits": 4}, PassContext(work_dir=tmp_path))

    ops = {node.op_type for node in onnx.load(str(out)).graph.node}
    assert "MatMulNBits" in ops and "MatMul" in ops  # attention's MatMuls have no weights
    assert report.details["matmuls"] == 15 and report.details["size_ratio"] < 0.35


def test_a_misspelt_setting_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="block_sise"):
        WEIGHT_ONLY.run(
            tmp_path / "m.onnx",
            tmp_path / "o.onnx",
            {"block_sise": 32},
            PassContext(work_dir=tmp_path),
        )


def test_a_model_without_a_cache_is_refused(tmp_path: Path) -> None:
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph), tmp_path / "relu.onnx")

    with pytest.raises(ModelRejected, match="not a decoder"):
        WEIGHT_ONLY.run(
            tmp_path / "relu.onnx", tmp_path / "o.onnx", {}, PassContext(work_dir=tmp_path)
        )
