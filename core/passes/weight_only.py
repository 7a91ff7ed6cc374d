"""Weight-only quantization passes for decoders (language models with a KV cache).

`weight_only`: MatMulNBits INT4 / INT8 for ONNX Runtime (optistudio.core.llm.weight_only states
the math); `nncf_weights`: nncf.compress_weights for OpenVINO, written as an IR. Both need no
calibration data, and both refuse a model that is not a decoder with the reason (weight-only
quantization pays off where decoding reads every weight once per token). A decoder NNCF cannot
read once converted (an operator output of dynamic element type) is GraphNotApplicable: the
recipe does not apply to this graph, with the sentence that says why.
"""

from __future__ import annotations

from pathlib import Path

from optistudio.core.llm.decoder import load_decoder_io
from optistudio.core.llm.openvino_weights import (
    NNCFWeightsConfig,
    NotForOpenVINO,
    compress_for_openvino,
)
from optistudio.core.llm.weight_only import WeightOnlyConfig, quantize_weight_only
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.prepare import GraphNotApplicable


def run_weight_only(
    model: Path, out: Path, config: WeightOnlyConfig, context: PassContext
) -> PassReport:
    load_decoder_io(model)  # ModelRejected with the reason when it is no decoder
    context.progress(0.0, "quantizing MatMul weights")
    report = quantize_weight_only(model, out, config)
    context.progress(1.0, "done")
    return PassReport(
        output=out,
        details={
            "matmuls": report.matmuls,
            "size_bytes": report.size_bytes,
            "size_ratio": round(report.size_ratio, 4),
            "bits": config.bits,
            "block_size": config.block_size,
        },
    )


def run_nncf_weights(
    model: Path, out: Path, config: NNCFWeightsConfig, context: PassContext
) -> PassReport:
    load_decoder_io(model)
    context.progress(0.0, "compressing weights with NNCF")
    try:
        target = compress_for_openvino(model, out.with_suffix(".xml"), config)
    except NotForOpenVINO as exc:
        raise GraphNotApplicable(exc.message, hint=exc.hint) from exc
    context.progress(1.0, "done")
    return PassReport(output=target, details={"mode": config.mode, "group_size": config.group_size})


WEIGHT_ONLY = PassInfo(
    name="weight_only",
    label="Weight-only INT4 / INT8 (MatMulNBits)",
    description=(
        "Stores a decoder's MatMul weights in 4 or 8 bits per block of 32-256 (round to "
        "nearest), keeping the embedding and LM head at 8 bits; activations stay in float. "
        "Decoding at batch 1 reads every weight once per token, so smaller weights decode "
        "faster. ONNX Runtime only (com.microsoft MatMulNBits); no calibration data."
    ),
    config="optistudio.core.llm.weight_only:WeightOnlyConfig",
    implementation="optistudio.core.passes.weight_only:run_weight_only",
    produces_precision="mixed",
)

NNCF_WEIGHTS = PassInfo(
    name="nncf_weights",
    label="Weight-only INT4 / INT8 with NNCF (for OpenVINO)",
    description=(
        "nncf.compress_weights on the decoder converted to OpenVINO: MatMul weights in INT4 "
        "groups of 128 (or INT8 per channel), the embedding and last layer at 8 bits; writes "
        "an OpenVINO IR. No calibration data."
    ),
    config="optistudio.core.llm.openvino_weights:NNCFWeightsConfig",
    implementation="optistudio.core.passes.weight_only:run_nncf_weights",
    produces_precision="mixed",
)
