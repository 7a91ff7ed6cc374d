"""NNCF's weight compression for OpenVINO on a decoder whose attention is com.microsoft
GroupQueryAttention, as ONNX Runtime GenAI's builder writes it. OpenVINO converts that attention
to an operator of its "extension" set (its IR files cannot hold it) and leaves the attention's
absent inputs as placeholders of dynamic element type, which NNCF refused with "NNCF is not yet
supported OpenVINO data type: dynamic". The recipe is now not applicable to such a decoder, in
one sentence naming the operator, before NNCF runs; the ONNX Runtime weight-only recipe
quantizes the same decoder, and a decoder without it still compresses."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from decoder_models import TinyShape, build_tiny_decoder
from gqa_decoder_models import HEAD_DIM, KV_HEADS, build_gqa_decoder

from optistudio.core.llm.openvino_weights import (
    NNCFWeightsConfig,
    NotForOpenVINO,
    check_for_nncf,
    compress_for_openvino,
)
from optistudio.core.llm.weight_only import WeightOnlyConfig, quantize_weight_only
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.prepare import GraphNotApplicable
from optistudio.core.passes.weight_only import run_nncf_weights

ov = pytest.importorskip("openvino")
pytest.importorskip("nncf")
os.environ.setdefault("NNCF_CI", "1")

APPLIES_NOT = "NNCF's weight compression for OpenVINO does not apply to this decoder"


def _dynamic_ops(model: object) -> set[str]:
    return {
        op.get_type_name()
        for op in model.get_ordered_ops()  # type: ignore[attr-defined]
        if any(output.get_element_type().is_dynamic() for output in op.outputs())
    }


def test_the_converted_attention_is_an_extension_with_dynamic_placeholders(
    tmp_path: Path,
) -> None:
    model = ov.convert_model(str(build_gqa_decoder(tmp_path / "gqa")))

    versions = {op.get_type_name(): op.get_type_info().version_id for op in model.get_ordered_ops()}

    assert versions["GroupQueryAttention"] == "extension"
    assert _dynamic_ops(model) == {"Constant"}  # what NNCF refused


def test_nncf_on_a_group_query_attention_decoder_is_not_applicable_in_one_sentence(
    tmp_path: Path,
) -> None:
    source = build_gqa_decoder(tmp_path / "gqa")
    context = PassContext(work_dir=tmp_path / "work", target_backend="openvino")

    with pytest.raises(GraphNotApplicable) as refused:
        run_nncf_weights(source, tmp_path / "out" / "model.onnx", NNCFWeightsConfig(), context)

    message = refused.value.message
    assert message.startswith(APPLIES_NOT) and "GroupQueryAttention" in message
    assert message.endswith("to an operator its IR files cannot hold.")
    assert "int4_weight_only" in (refused.value.hint or "")
    assert not (tmp_path / "out").exists()  # refused before any work


def test_the_onnx_runtime_weight_only_recipe_quantizes_the_same_decoder(tmp_path: Path) -> None:
    source = build_gqa_decoder(tmp_path / "gqa")
    target = tmp_path / "int4" / "model.onnx"

    report = quantize_weight_only(source, target, WeightOnlyConfig(block_size=32))

    assert report.matmuls >= 4 and report.size_ratio < 0.5
    empty = np.zeros((1, KV_HEADS, 0, HEAD_DIM), np.float32)
    feeds = {"input_ids": np.array([[1, 2, 3]]), "attention_mask": np.ones((1, 3), np.int64)}
    feeds |= {"past_key_values.0.key": empty, "past_key_values.0.value": empty}
    logits = ort.InferenceSession(str(target)).run(["logits"], feeds)[0]
    assert logits.shape == (1, 3, 256) and np.isfinite(logits).all()


def test_a_decoder_without_it_still_compresses(tmp_path: Path) -> None:
    source = build_tiny_decoder(tmp_path / "tiny", TinyShape(hidden=128, ffn=256, vocab=256))

    target = compress_for_openvino(source, tmp_path / "ov" / "model.xml")

    compressed = ov.Core().read_model(str(target))
    kinds = {
        op.get_element_type().get_type_name()
        for op in compressed.get_ordered_ops()
        if op.get_type_name() == "Constant"
    }
    assert "u4" in kinds


def test_an_operator_output_of_dynamic_type_is_not_applicable_in_one_sentence() -> None:
    data = ov.opset13.parameter([1, 4], ov.Type.dynamic, name="x")
    model = ov.Model([ov.opset13.relu(data)], [data], "dynamic")

    with pytest.raises(NotForOpenVINO) as refused:
        check_for_nncf(model, ov.get_version())

    assert refused.value.message.endswith("undetermined element type (Parameter 'x').")
