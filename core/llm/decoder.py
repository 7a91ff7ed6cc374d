"""Recognize a decoder-only language model by its KV-cache interface.

The layouts of Optimum's exports and of ONNX Runtime GenAI's model builder share their names:
`input_ids` [batch, new], `attention_mask` [batch, past + new], an optional `position_ids`
[batch, new], and per layer N `past_key_values.N.key` / `.value` in and `present.N.key` /
`.value` out, each [batch, kv_heads, sequence, head_dim]; `logits` [batch, new, vocab]. A step
feeds the presents of the previous step as the pasts of the next (the cache grows by `new`).
"""

from __future__ import annotations

import re
from pathlib import Path

import onnx
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import ModelRejected
from optistudio.core.llm.configs import ConfigFacts, config_beside

PAST_NAME = re.compile(r"^(?:past_key_values|past)\.(\d+)\.(key|value)$")
PRESENT_NAME = re.compile(r"^(?:present|present_key_values)\.(\d+)\.(key|value)$")
TOKEN_INPUTS = ("input_ids", "attention_mask", "position_ids")
LOGITS = "logits"
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


class KVLayout(BaseModel):
    """The cache of one layer as the graph declares it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_heads: int = Field(description="KV heads (dim 1 of the past key).")
    head_dim: int = Field(description="Size of one head (dim 3 of the past key).")
    dtype: str = Field(description="numpy dtype name of the cache: 'float32', 'float16'.")


class DecoderIO(BaseModel):
    """The names a decoding loop feeds and reads, in layer order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_ids: str = "input_ids"
    attention_mask: str = "attention_mask"
    position_ids: str | None = Field(
        default="position_ids", description="None when the graph computes positions itself."
    )
    past_keys: list[str]
    past_values: list[str]
    logits: str = LOGITS
    present_keys: list[str]
    present_values: list[str]
    outputs: list[str] = Field(description="Every graph output in order (what a run returns).")
    cache: KVLayout

    @property
    def layers(self) -> int:
        return len(self.past_keys)


def read_decoder_io(model: onnx.ModelProto, config: ConfigFacts | None = None) -> DecoderIO:
    """The decoding interface of `model`, or ModelRejected saying what is missing. KV heads and
    head size come from the past key's dims, else from `config` (GenAI's builder leaves the
    head size symbolic)."""
    graph = model.graph
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = {value.name: value for value in graph.input if value.name not in initializers}
    outputs = [value.name for value in graph.output]
    _check_tokens(inputs)
    past = _layered(inputs, PAST_NAME, "inputs")
    present = _layered(outputs, PRESENT_NAME, "outputs")
    if LOGITS not in outputs:
        raise _not_decoder(f"it has no '{LOGITS}' output (outputs: {', '.join(outputs)})")
    if len(past) != len(present):
        raise _not_decoder(f"it takes {len(past)} cached layers but returns {len(present)}")
    _check_extra(inputs)
    return DecoderIO(
        position_ids="position_ids" if "position_ids" in inputs else None,
        past_keys=[pair[0] for pair in past],
        past_values=[pair[1] for pair in past],
        present_keys=[pair[0] for pair in present],
        present_values=[pair[1] for pair in present],
        outputs=outputs,
        cache=_kv_layout(inputs[past[0][0]], config or ConfigFacts()),
    )


def load_decoder_io(path: Path) -> DecoderIO:
    """read_decoder_io of the ONNX file at `path` with the config beside it (no weights read)."""
    return read_decoder_io(onnx.load(str(path), load_external_data=False), config_beside(path))


def is_decoder(model: onnx.ModelProto) -> bool:
    """Whether `model` has the KV-cache interface read_decoder_io accepts."""
    try:
        read_decoder_io(model)
    except ModelRejected:
        return False
    return True


def _check_tokens(inputs: dict[str, onnx.ValueInfoProto]) -> None:
    missing = [name for name in TOKEN_INPUTS[:2] if name not in inputs]
    if missing:
        found = ", ".join(inputs) or "none"
        raise _not_decoder(f"it has no {' or '.join(missing)} input (inputs: {found})")


def _layered(
    names: dict[str, onnx.ValueInfoProto] | list[str], pattern: re.Pattern[str], kind: str
) -> list[tuple[str, str]]:
    """(key, value) names per layer 0..N-1, from names matching `pattern`."""
    found: dict[int, dict[str, str]] = {}
    for name in names:
        match = pattern.match(name)
        if match:
            found.setdefault(int(match[1]), {})[match[2]] = name
    if not found:
        raise _not_decoder(f"no KV-cache {kind} named like {pattern.pattern}")
    layers = sorted(found)
    if layers != list(range(len(layers))) or any(len(found[i]) != 2 for i in layers):
        raise _not_decoder(f"its KV-cache {kind} skip a layer or lack a key or value")
    return [(found[i]["key"], found[i]["value"]) for i in layers]


def _check_extra(inputs: dict[str, onnx.ValueInfoProto]) -> None:
    extra = [name for name in inputs if name not in TOKEN_INPUTS and not PAST_NAME.match(name)]
    if extra:
        raise ModelRejected(
            f"This decoder also needs {', '.join(extra)}, which the decoding loop cannot feed.",
            hint="Export it with separate past inputs and no merged 'use_cache_branch' "
            "(Optimum: --no-post-process; GenAI's model builder: the default layout).",
        )


def _kv_layout(past_key: onnx.ValueInfoProto, config: ConfigFacts) -> KVLayout:
    tensor = past_key.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
    if len(dims) != 4:
        raise _not_decoder(
            f"its cache input {past_key.name} has {len(dims)} dims, not 4 [batch, kv_heads, "
            "sequence, head_dim]"
        )
    kv_heads, head_dim = dims[1] or config.kv_heads, dims[3] or config.head_dim
    if kv_heads is None or head_dim is None:
        raise ModelRejected(
            f"The cache input {past_key.name} is {dims}: its KV heads and head size are not "
            "fixed, and no config beside the model states them.",
            hint="Put the exporter's genai_config.json or config.json beside the .onnx file.",
        )
    dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
    if dtype not in DTYPE_BYTES:
        raise _not_decoder(f"its cache is {dtype}, not a float type")
    return KVLayout(kv_heads=kv_heads, head_dim=head_dim, dtype=dtype)


def _not_decoder(why: str) -> ModelRejected:
    return ModelRejected(
        f"This is not a decoder with a KV cache we can drive: {why}.",
        hint="Export the language model with its cache (Optimum: --task text-generation-with-past; "
        "or ONNX Runtime GenAI's model builder).",
    )
