"""Triton Inference Server `config.pbtxt` for a model and chosen batching settings.

`triton_config` writes the protobuf text format Triton reads (name, platform, max_batch_size,
inputs/outputs without the batch dim, dynamic_batching, instance_group); `parameters_block` a
backend's `parameters` map (the openvino backend's HINT_BF16, INFERENCE_NUM_THREADS). `parse_pbtxt` reads
that subset back into nested dicts (repeated fields become lists), enough to check what we wrote.
"""

from __future__ import annotations

import re
from typing import Any

from optistudio.core.batching.applicability import require_batch_dim
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo, TensorSpec

TRITON_TYPES = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "bfloat16": "TYPE_BF16",
    "str": "TYPE_STRING",
    "object": "TYPE_STRING",
}
KINDS = ("KIND_CPU", "KIND_GPU", "KIND_AUTO")
_REPEATED = {
    "input",
    "output",
    "instance_group",
    "preferred_batch_size",
    "dims",
    "gpus",
    "parameters",
}


def triton_config(
    name: str,
    info: ModelInfo,
    *,
    max_batch_size: int,
    preferred_batch_sizes: list[int],
    max_queue_delay_us: int,
    instances: int = 1,
    kind: str = "KIND_CPU",
    platform: str = "onnxruntime_onnx",
) -> str:
    """config.pbtxt text for `info` served with Triton's dynamic batcher.

    Dim 0 of every input and output is the batch dim and is left out of `dims` (Triton adds
    it when max_batch_size > 0); other dynamic dims are written as -1. A model without a
    dynamic batch dim is refused with InvalidSpec saying why. `max_batch_size` 0 is Triton's
    "no batching": every dim is written as declared (a batch fixed at 1 included), there is no
    dynamic batcher, and `instances` sessions serve one request each.
    """
    if max_batch_size:
        require_batch_dim(info)
    _check_settings(name, max_batch_size, preferred_batch_sizes, max_queue_delay_us, instances)
    if kind not in KINDS:
        raise InvalidSpec(f"Unknown instance kind {kind!r}.", hint=f"Use one of {list(KINDS)}.")
    first = 1 if max_batch_size else 0
    lines = [f'name: "{name}"', f'platform: "{platform}"', f"max_batch_size: {max_batch_size}"]
    lines += _tensor_block("input", info.inputs, first)
    lines += _tensor_block("output", info.outputs, first)
    if max_batch_size:
        lines += ["dynamic_batching {"]
        lines += [f"  preferred_batch_size: {size}" for size in preferred_batch_sizes]
        lines += [f"  max_queue_delay_microseconds: {max_queue_delay_us}", "}"]
    lines += ["instance_group [", "  {", f"    count: {instances}", f"    kind: {kind}"]
    return "\n".join([*lines, "  }", "]"]) + "\n"


def parameters_block(parameters: dict[str, str]) -> str:
    """config.pbtxt's `parameters` map (a backend's settings, e.g. the openvino backend's
    HINT_BF16 and INFERENCE_NUM_THREADS), one entry per key; '' for none."""
    return "".join(
        f'parameters {{\n  key: "{key}"\n  value {{ string_value: "{value}" }}\n}}\n'
        for key, value in parameters.items()
    )


def _check_settings(
    name: str, max_batch: int, preferred: list[int], delay_us: int, instances: int
) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
        raise InvalidSpec(
            f"Model name {name!r} is not a valid Triton model name.",
            hint="Use letters, digits, '_', '-' or '.'.",
        )
    if max_batch < 0:
        raise InvalidSpec(f"max_batch_size must be 0 (no batching) or more, got {max_batch}.")
    bad = [size for size in preferred if not 1 <= size <= max_batch]
    if bad:
        raise InvalidSpec(
            f"Preferred batch sizes {bad} are outside 1..{max_batch} (max_batch_size).",
        )
    if delay_us < 0 or instances < 1:
        raise InvalidSpec(
            f"Need max_queue_delay_us >= 0 and instances >= 1, got {delay_us} and {instances}."
        )


def _tensor_block(field: str, specs: list[TensorSpec], first: int = 1) -> list[str]:
    """The block of `specs`, their dims from index `first` (1: the batch dim left out)."""
    if not specs:
        return []
    blocks = []
    for spec in specs:
        dims = ", ".join(str(_dim(dim)) for dim in spec.shape[first:])
        blocks.append(
            f'  {{\n    name: "{spec.name}"\n    data_type: {_triton_type(spec)}\n'
            f"    dims: [ {dims} ]\n  }}"
        )
    return [f"{field} [", ",\n".join(blocks), "]"]


def _dim(dim: int | str | None) -> int:
    return dim if isinstance(dim, int) and dim > 0 else -1


def _triton_type(spec: TensorSpec) -> str:
    try:
        return TRITON_TYPES[spec.dtype]
    except KeyError:
        raise InvalidSpec(
            f"Tensor {spec.name!r} has dtype {spec.dtype!r}, which Triton has no type for.",
            hint=f"Triton types exist for {sorted(TRITON_TYPES)}.",
        ) from None


_TOKEN = re.compile(r'\s*(?:(#[^\n]*)|([{}\[\]:,])|("(?:[^"\\]|\\.)*")|([^\s{}\[\]:,"#]+))')


def parse_pbtxt(text: str) -> dict[str, Any]:
    """Nested dicts from protobuf text; fields known to repeat are always lists.

    Scalars become int, float, or str (quoted strings unquoted, enum names kept as text).
    """
    tokens = _tokenize(text)
    result, position = _parse_fields(tokens, 0, closing=None)
    if position != len(tokens):
        raise ValueError(f"unexpected {tokens[position]!r} in pbtxt")
    return result


def _tokenize(text: str) -> list[str]:
    tokens, position = [], 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None or match.end() == position:
            if text[position:].strip():
                raise ValueError(f"cannot read pbtxt near {text[position : position + 20]!r}")
            break
        position = match.end()
        token = match.group(2) or match.group(3) or match.group(4)
        if token:
            tokens.append(token)
    return tokens


def _parse_fields(tokens: list[str], position: int, closing: str | None) -> tuple[dict, int]:
    fields: dict[str, Any] = {}
    while position < len(tokens) and tokens[position] != closing:
        key = tokens[position]
        position += 1
        if tokens[position] == ":":
            position += 1
        value, position = _parse_value(tokens, position)
        _store(fields, key, value)
        if position < len(tokens) and tokens[position] in (",", ";"):
            position += 1
    if closing is not None:
        if position >= len(tokens):
            raise ValueError(f"missing {closing!r} in pbtxt")
        position += 1
    return fields, position


def _parse_value(tokens: list[str], position: int) -> tuple[Any, int]:
    token = tokens[position]
    if token == "{":
        return _parse_fields(tokens, position + 1, closing="}")
    if token == "[":
        items: list[Any] = []
        position += 1
        while tokens[position] != "]":
            item, position = _parse_value(tokens, position)
            items.append(item)
            if tokens[position] == ",":
                position += 1
        return items, position + 1
    return _scalar(token), position + 1


def _scalar(token: str) -> int | float | str:
    if token.startswith('"'):
        return bytes(token[1:-1], "utf-8").decode("unicode_escape")
    for cast in (int, float):
        try:
            return cast(token)
        except ValueError:
            pass
    return token


def _store(fields: dict[str, Any], key: str, value: Any) -> None:
    if key in _REPEATED:
        items = value if isinstance(value, list) else [value]
        fields.setdefault(key, []).extend(items)
    elif key in fields:
        raise ValueError(f"field {key!r} given twice in pbtxt")
    else:
        fields[key] = value
