"""Weight-only quantization of a decoder for ONNX Runtime: MatMulNBits, 4 or 8 bits.

Each MatMul weight W [K, N] is cut along K into blocks of `block_size`; a block keeps one scale
(and, asymmetric, one zero point) and its values round to the nearest level (RTN):
q = clamp(round(w / s) + z, 0, 2^bits - 1), w ~ (q - z) s. Activations stay in float; ONNX
Runtime's MatMulNBits unpacks the weights on the fly, or with accuracy_level 4 quantizes the
activations to INT8 per block and multiplies in integers (its fastest CPU path).

The LM head and the token embedding hold few weights and decide every token, so by default they
keep 8 bits when the rest goes to 4. ONNX Runtime quantizes Gather only to 4 bits, so the
embedding's 8 bits are our own: symmetric per row, e = q s_row, as Gather(q) x Gather(s_row).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
from onnx import numpy_helper
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import PassFailed, first_line
from optistudio.core.llm.card import lm_head_node, size_on_disk
from optistudio.core.llm.configs import CONFIG_FILES, config_beside
from optistudio.core.llm.decoder import DecoderIO, read_decoder_io

logger = logging.getLogger(__name__)

FLOAT = onnx.TensorProto.FLOAT
PROTOBUF_LIMIT = 1_800_000_000
"""Bytes past which a model is saved with external data (protobuf stops at 2 GiB)."""


class WeightOnlyConfig(BaseModel):
    """Settings of the MatMulNBits weight-only quantization."""

    model_config = ConfigDict(extra="forbid")

    bits: Literal[4, 8] = Field(default=4, description="Bits per MatMul weight.")
    block_size: Literal[16, 32, 64, 128, 256] = Field(
        default=32,
        description="Weights per scale along K. Smaller blocks follow the weights more closely "
        "(better perplexity) at a larger file (32: ~5 bits a 4-bit weight, 128: ~4.3).",
    )
    symmetric: bool = Field(
        default=False, description="No zero points (level 0 at zero); asymmetric fits better."
    )
    accuracy_level: Literal[0, 1, 2, 3, 4] = Field(
        default=4,
        description="MatMulNBits compute type: 0 unset, 1 fp32, 2 fp16, 3 bf16, 4 int8 "
        "(activations quantized per block; ONNX Runtime's fastest on CPUs, its model builder's "
        "CPU default).",
    )
    head_bits: Literal[4, 8, 32] = Field(
        default=8, description="Bits of the LM head (32 = left in float)."
    )
    embedding_bits: Literal[8, 32] = Field(
        default=8, description="Bits of the token embedding table (32 = left in float)."
    )


class WeightOnlyReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    config: WeightOnlyConfig
    matmuls: int = Field(description="MatMul weights quantized (the LM head included).")
    size_bytes: int
    original_size_bytes: int

    @property
    def size_ratio(self) -> float:
        return self.size_bytes / self.original_size_bytes


def quantize_weight_only(
    source: Path, target: Path, config: WeightOnlyConfig | None = None
) -> WeightOnlyReport:
    """Write the weight-only quantized decoder `source` to `target`."""
    config = config or WeightOnlyConfig()
    model = onnx.load(str(source))
    head = _name_nodes(model, read_decoder_io(model, config_beside(source)))
    try:
        model = _quantize_matmuls(model, config, head)
    except Exception as exc:  # the quantizer raises its own untyped errors
        raise PassFailed(
            f"ONNX Runtime's MatMulNBits quantizer failed on this decoder: {first_line(exc)}",
            hint="Try block_size 128 or bits 8; a MatMul whose weight is not a constant 2-D "
            "matrix is left in float.",
        ) from exc
    if config.embedding_bits == 8:
        _embedding_to_int8(model)
    _save(model, target)
    copy_configs(source.parent, target.parent)
    matmuls = sum(node.op_type == "MatMulNBits" for node in model.graph.node)
    return WeightOnlyReport(
        config=config,
        matmuls=matmuls,
        size_bytes=size_on_disk(target),
        original_size_bytes=size_on_disk(source),
    )


def _name_nodes(model: onnx.ModelProto, io: DecoderIO) -> str | None:
    """Give unnamed nodes a name (the quantizer selects nodes by name); the LM head's name."""
    for i, node in enumerate(model.graph.node):
        if not node.name:
            node.name = f"{node.op_type.lower()}_{i}"
    head = lm_head_node(model, io)
    return head.name if head is not None and head.op_type == "MatMul" else None


def _quantize_matmuls(
    model: onnx.ModelProto, config: WeightOnlyConfig, head: str | None
) -> onnx.ModelProto:
    separate_head = head is not None and config.head_bits != config.bits
    model = _nbits(model, config, config.bits, exclude=[head] if separate_head else [])
    if separate_head and config.head_bits != 32:
        others = [n.name for n in model.graph.node if n.op_type == "MatMul" and n.name != head]
        model = _nbits(model, config, config.head_bits, exclude=others)
    return model


def _nbits(
    model: onnx.ModelProto, config: WeightOnlyConfig, bits: int, *, exclude: list[str | None]
) -> onnx.ModelProto:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(
        model,
        bits=bits,
        block_size=config.block_size,
        is_symmetric=config.symmetric,
        accuracy_level=config.accuracy_level or None,
        nodes_to_exclude=[name for name in exclude if name],
        op_types_to_quantize=("MatMul",),
    )
    quiet = logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer")
    level = quiet.level
    quiet.setLevel(logging.WARNING)  # it logs every node at INFO
    try:
        quantizer.process()
    finally:
        quiet.setLevel(level)
    result: onnx.ModelProto = quantizer.model.model
    return result


def _embedding_to_int8(model: onnx.ModelProto) -> None:
    """Gather(E, input_ids) -> Gather(q, ids) x Gather(s, ids), q = round(E / s) per row."""
    graph = model.graph
    tables = {tensor.name: tensor for tensor in graph.initializer}
    nodes: list[onnx.NodeProto] = []
    replaced = []
    for node in graph.node:
        table = tables.get(node.input[0]) if node.op_type == "Gather" else None
        if table is None or node.input[1] != "input_ids" or table.data_type != FLOAT:
            nodes.append(node)
            continue
        graph.initializer.extend(_int8_table(table))
        nodes += _int8_gather_nodes(node, table.name)
        replaced.append(table.name)
    graph.ClearField("node")
    graph.node.extend(nodes)
    for name in replaced:
        _drop_unused(graph, name)


def _int8_table(table: onnx.TensorProto) -> list[onnx.TensorProto]:
    values = numpy_helper.to_array(table)
    scale = np.maximum(np.abs(values).max(axis=1, keepdims=True), 1e-12) / 127
    quantized = np.clip(np.round(values / scale), -127, 127).astype(np.int8)
    return [
        numpy_helper.from_array(quantized, f"{table.name}_int8"),
        numpy_helper.from_array(scale.astype(np.float32), f"{table.name}_row_scale"),
    ]


def _int8_gather_nodes(node: onnx.NodeProto, table: str) -> list[onnx.NodeProto]:
    helper, out, ids = onnx.helper, node.output[0], node.input[1]
    prefix = node.name or f"{table}_gather"
    return [
        helper.make_node("Gather", [f"{table}_int8", ids], [f"{prefix}_q"], name=f"{prefix}_q"),
        helper.make_node(
            "Cast", [f"{prefix}_q"], [f"{prefix}_qf"], to=onnx.TensorProto.FLOAT, name=f"{prefix}_c"
        ),
        helper.make_node(
            "Gather", [f"{table}_row_scale", ids], [f"{prefix}_s"], name=f"{prefix}_s"
        ),
        helper.make_node("Mul", [f"{prefix}_qf", f"{prefix}_s"], [out], name=f"{prefix}_dq"),
    ]


def _drop_unused(graph: onnx.GraphProto, name: str) -> None:
    if any(name in node.input for node in graph.node):
        return  # tied: the LM head still reads the float table
    for tensor in list(graph.initializer):
        if tensor.name == name:
            graph.initializer.remove(tensor)


def copy_configs(source: Path, target: Path) -> None:
    """The config and tokenizer files beside the original, beside the variant too (its card
    reads them; a variant computes what its original computes)."""
    if source.resolve() == target.resolve():
        return
    for name in (*CONFIG_FILES, "tokenizer.json", "tokenizer_config.json"):
        if (source / name).is_file():
            shutil.copyfile(source / name, target / name)


def _save(model: onnx.ModelProto, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if model.ByteSize() > PROTOBUF_LIMIT:
        onnx.save(model, str(target), save_as_external_data=True, location=f"{target.name}.data")
    else:
        onnx.save(model, str(target))
    logger.info("wrote %s (%d bytes)", target, target.stat().st_size)
