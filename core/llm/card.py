"""The model card of a decoder: its shape, cache cost and where its parameters sit.

Facts come from the graph first (layers, KV heads, head size, vocabulary: what it computes),
then from a `genai_config.json` (ONNX Runtime GenAI) or `config.json` (Hugging Face) beside the
file for what a graph does not state plainly (query heads, context length); `sources` says which.

KV-cache bytes per token = 2 (key and value) x layers x kv_heads x head_dim x bytes per element:
what one more token of context costs per sequence. Parameters count logical weights: a 4-bit
MatMulNBits weight counts K x N, its scales and zero points not at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import ModelRejected
from optistudio.core.llm.configs import config_beside
from optistudio.core.llm.decoder import DTYPE_BYTES, DecoderIO, read_decoder_io
from optistudio.core.model.contained import contained

PASS_THROUGH = {"Reshape", "Cast", "Identity", "Squeeze", "Unsqueeze"}
WEIGHT_OPS = {"MatMul", "Gemm", "MatMulNBits", "MatMulInteger"}
QUANTIZED_WEIGHT_OPS = {"MatMulNBits", "GatherBlockQuantized", "DequantizeLinear", "MatMulInteger"}
FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


class ParameterSplit(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    embedding: int = Field(description="Token (and learned position) embedding tables.")
    lm_head: int = Field(description="The projection to the vocabulary; 0 when tied.")
    rest: int = Field(description="Everything else: attention, MLP, norms.")
    tied: bool = Field(default=False, description="The LM head reuses the embedding table.")

    @property
    def total(self) -> int:
        return self.embedding + self.lm_head + self.rest


class DecoderCard(BaseModel):
    """What a person wants to know about a small language model before serving it."""

    model_config = ConfigDict(extra="forbid")

    io: DecoderIO
    layers: int
    heads: int | None = Field(description="Query heads; None when neither graph nor config say.")
    kv_heads: int
    head_dim: int
    hidden: int | None = Field(description="Width of the residual stream (embedding width).")
    vocab: int | None
    context_length: int | None
    kv_bytes_per_token: int = Field(description="Cache bytes one token adds to one sequence.")
    parameters: ParameterSplit
    size_bytes: int = Field(description="The .onnx file plus its external data on disk.")
    sources: dict[str, str] = Field(description="Fact -> where it was read ('graph', a file).")


def read_card(path: Path) -> DecoderCard:
    """The card of the decoder at `path` (ModelRejected when it is not one we can drive)."""
    model = onnx.load(str(path), load_external_data=False)
    config = config_beside(path)
    io = read_decoder_io(model, config)
    graph = _GraphIndex(model.graph)
    hidden = graph.embedding_width()
    facts: dict[str, tuple[Any, str]] = {
        "vocab": (graph.vocab(io), "graph"),
        "heads": (_heads(io, hidden), "graph (hidden / head_dim)"),
        "context_length": (graph.position_rows(), "graph (position table)"),
    }
    found = config.model_dump(include={"vocab", "heads", "context_length"}, exclude_none=True)
    facts |= {key: (value, config.source) for key, value in found.items()}
    cache = io.cache
    return DecoderCard(
        io=io,
        layers=io.layers,
        heads=facts["heads"][0],
        kv_heads=cache.kv_heads,
        head_dim=cache.head_dim,
        hidden=hidden,
        vocab=facts["vocab"][0],
        context_length=facts["context_length"][0],
        kv_bytes_per_token=kv_bytes_per_token(io),
        parameters=graph.split(io),
        size_bytes=size_on_disk(path),
        sources={key: source for key, (value, source) in facts.items() if value is not None},
    )


def kv_bytes_per_token(io: DecoderIO) -> int:
    """2 (key and value) x layers x kv_heads x head_dim x bytes per element."""
    cache = io.cache
    return 2 * io.layers * cache.kv_heads * cache.head_dim * DTYPE_BYTES[cache.dtype]


def lm_head_node(model: onnx.ModelProto, io: DecoderIO) -> onnx.NodeProto | None:
    """The MatMul (or Gemm, MatMulNBits) that projects to the vocabulary, when there is one."""
    return _GraphIndex(model.graph).lm_head(io)


def size_on_disk(path: Path) -> int:
    """Bytes of the .onnx file and every external data file it names (an OpenVINO .xml: with
    its .bin)."""
    return sum(file.stat().st_size for file in model_files(path))


def model_files(path: Path) -> list[Path]:
    """The .onnx file and the external data files it names; an OpenVINO .xml and its .bin.
    ModelRejected when a name leads outside the model's folder (core.model.contained)."""
    if path.suffix == ".xml":
        weights = path.with_suffix(".bin")
        return [path, weights] if weights.is_file() else [path]
    model = onnx.load(str(path), load_external_data=False)
    locations = {
        entry.value
        for tensor in model.graph.initializer
        for entry in tensor.external_data
        if entry.key == "location"
    }
    files = [contained(path.parent, name) for name in sorted(locations)]
    if None in files:
        raise ModelRejected(
            "The model names an external data file that is not inside its folder; refusing to "
            "read it.",
            hint="External data must sit in the model's folder and be named by relative paths.",
        )
    return [path, *(file for file in files if file is not None)]


def _heads(io: DecoderIO, hidden: int | None) -> int | None:
    return hidden // io.cache.head_dim if hidden else None


class _GraphIndex:
    """Who produces and consumes what, and the initializers' shapes (no weights read)."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.shapes = {tensor.name: list(tensor.dims) for tensor in graph.initializer}
        self.floats = {
            tensor.name
            for tensor in graph.initializer
            if tensor.data_type in FLOAT_TYPES and len(tensor.dims) > 0
        }
        self.nodes = list(graph.node)
        self.producer = {out: node for node in self.nodes for out in node.output}

    def gathers_of(self, name: str) -> list[onnx.NodeProto]:
        """Gather-like nodes indexing an initializer table with graph input `name`."""
        return [
            node
            for node in self.nodes
            if node.op_type.startswith("Gather")
            and len(node.input) > 1
            and node.input[1] == name
            and node.input[0] in self.shapes
        ]

    def table(self, node: onnx.NodeProto) -> tuple[int, int]:
        """(rows, logical width) of the table a Gather-like node reads."""
        rows, width = self.shapes[node.input[0]][:2]
        if node.op_type == "GatherBlockQuantized":
            width *= 8 // _int_attr(node, "bits", 4)
        return rows, width

    def embedding_width(self) -> int | None:
        tables = [self.table(node) for node in self.gathers_of("input_ids")]
        return max(tables)[1] if tables else None

    def position_rows(self) -> int | None:
        tables = [self.table(node) for node in self.gathers_of("position_ids")]
        return max(tables)[0] if tables else None

    def vocab(self, io: DecoderIO) -> int | None:
        tables = [self.table(node) for node in self.gathers_of(io.input_ids)]
        return max(tables)[0] if tables else None

    def lm_head(self, io: DecoderIO) -> onnx.NodeProto | None:
        node = self.producer.get(io.logits)
        while node is not None and node.op_type in PASS_THROUGH:
            node = self.producer.get(node.input[0])
        return node if node is not None and node.op_type in WEIGHT_OPS else None

    def split(self, io: DecoderIO) -> ParameterSplit:
        tables = self.gathers_of(io.input_ids) + self.gathers_of("position_ids")
        largest_token_table = max(
            (n for n in tables if n.input[1] == io.input_ids), key=self._count, default=None
        )
        embedding_nodes = [n for n in tables if n.input[1] != io.input_ids] + (
            [largest_token_table] if largest_token_table is not None else []
        )
        embedding = sum(self._count(node) for node in embedding_nodes)
        head = self.lm_head(io)
        head_weight = self._head_weight(head) if head is not None else None
        tied = head_weight in {n.input[0] for n in embedding_nodes}
        lm_head = self._count(head) if head is not None and not tied else 0
        skip = {id(node) for node in tables} | ({id(head)} if head is not None else set())
        rest = self._rest(skip, seen={n.input[0] for n in tables} | {head_weight or ""})
        return ParameterSplit(embedding=embedding, lm_head=lm_head, rest=rest, tied=tied)

    def _head_weight(self, head: onnx.NodeProto) -> str | None:
        name = head.input[1]
        source = self.producer.get(name)
        if source is not None and source.op_type == "Transpose":
            name = source.input[0]
        return name if name in self.shapes else None

    def _rest(self, skip: set[int], seen: set[str]) -> int:
        total = 0
        for node in self.nodes:
            if id(node) in skip:
                continue
            for name in _weight_inputs(node):
                counts = name in self.floats or node.op_type in QUANTIZED_WEIGHT_OPS
                if name in self.shapes and name not in seen and counts:
                    seen.add(name)
                    total += self._elements(node, name)
        return total

    def _count(self, node: onnx.NodeProto | None) -> int:
        if node is None:
            return 0
        weight = node.input[0] if node.op_type.startswith("Gather") else self._head_weight(node)
        return self._elements(node, weight) if weight else 0

    def _elements(self, node: onnx.NodeProto, name: str) -> int:
        if node.op_type == "MatMulNBits" and name == node.input[1]:
            return _int_attr(node, "K", 0) * _int_attr(node, "N", 0)
        count = int(np.prod(self.shapes[name])) if self.shapes[name] else 1
        if node.op_type == "GatherBlockQuantized" and name == node.input[0]:
            count *= 8 // _int_attr(node, "bits", 4)
        return count


def _weight_inputs(node: onnx.NodeProto) -> list[str]:
    """The inputs of `node` that hold weights, not quantization scales or zero points."""
    if node.op_type in ("MatMulNBits", "GatherBlockQuantized"):
        keep = [1, 5] if node.op_type == "MatMulNBits" else [0]
        return [node.input[i] for i in keep if i < len(node.input) and node.input[i]]
    if node.op_type in ("DequantizeLinear", "QuantizeLinear"):
        return list(node.input[:1])
    if node.op_type == "MatMulInteger":
        return list(node.input[1:2])
    return list(node.input)


def _int_attr(node: onnx.NodeProto, name: str, default: int) -> int:
    for attribute in node.attribute:
        if attribute.name == name:
            return int(attribute.i)
    return default
