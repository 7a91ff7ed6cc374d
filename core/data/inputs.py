"""Synthetic inputs for a model: concrete shapes for dynamic dims, and data to fill them.

Shape rule: a dynamic dim 0 is the batch dim and takes `batch_size`; a fixed dim 0 is a fixed
batch, so any other batch size is an error. Other dynamic dims take the size the user named
(by symbolic name like "sequence", or "INPUT.INDEX" like "input_ids.1"), else
DEFAULT_DYNAMIC_DIM with a warning. A user override gives an input's full shape.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Annotated, TypeGuard

import numpy as np
from pydantic import Field

from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import Dim, TensorSpec

DEFAULT_DYNAMIC_DIM = 16

InputShapes = Annotated[
    dict[str, list[int]],
    Field(description="Full input shapes by input name, e.g. {'input_ids': [1, 128]}."),
]
"""The shapes field of every spec that feeds a model (declare it with default_factory=dict)."""
NamedDims = Annotated[
    dict[str, int], Field(description="Sizes of named dynamic dims, e.g. {'sequence': 128}.")
]
"""The dims field of every spec that feeds a model (declare it with default_factory=dict)."""
"""Size of a dynamic dim other than the batch (a sequence length, an image side) when unset."""

TOKEN_ID_LIMIT = 100
"""Integer inputs are drawn from [0, TOKEN_ID_LIMIT): valid ids for any real vocabulary."""

_FLOATS = ("float16", "float32", "float64")
_INTS = ("int32", "int64")
SUPPORTED_DTYPES = (*_FLOATS, *_INTS, "bool", "uint8")


def resolve_shape(
    spec: TensorSpec,
    *,
    batch_size: int,
    dims: dict[str, int],
    override: list[int] | None = None,
) -> tuple[tuple[int, ...], list[str]]:
    """The concrete shape of one input and warnings about dims that fell back to defaults.

    With `override` (a full shape) the rank and the fixed dims must match it, and a dynamic
    dim 0 still takes `batch_size`. Raises InvalidSpec for a batch size a fixed batch refuses.
    """
    _check_batch(spec, batch_size)
    if override is not None:
        return _apply_override(spec, override, batch_size), []
    shape, warnings = [], []
    for index, dim in enumerate(spec.shape):
        size, warning = _resolve_dim(spec, index, dim, batch_size, dims)
        shape.append(size)
        if warning:
            warnings.append(warning)
    return tuple(shape), warnings


def parse_shape_overrides(texts: Iterable[str]) -> dict[str, list[int]]:
    """Parse "NAME=D1,D2,..." strings (the CLI's --shape) into full shapes by input name."""
    overrides = {}
    for text in texts:
        name, sep, sizes = text.partition("=")
        try:
            shape = [int(size) for size in sizes.split(",")]
        except ValueError:
            shape = []
        if not sep or not name.strip() or not shape or min(shape) <= 0:
            raise InvalidSpec(
                f"Bad shape {text!r}: expected NAME=D1,D2,... with positive sizes.",
                hint="For example --shape input=1,3,224,224",
            )
        overrides[name.strip()] = shape
    return overrides


def dims_from_overrides(specs: list[TensorSpec], overrides: dict[str, list[int]]) -> dict[str, int]:
    """Symbolic dim sizes implied by full-shape overrides, so sibling inputs agree.

    Overriding input_ids=1,128 also sets "sequence" to 128 for an attention_mask declared
    [batch, sequence]. Raises InvalidSpec for an override naming no input of the model.
    """
    by_name = {spec.name: spec for spec in specs}
    unknown = sorted(set(overrides) - set(by_name))
    if unknown:
        raise InvalidSpec(
            f"Shape given for unknown input(s) {unknown}. Inputs: {sorted(by_name)}.",
            hint="Check the input names on the model card.",
        )
    implied = {}
    for name, shape in overrides.items():
        for index, dim in enumerate(by_name[name].shape):
            if isinstance(dim, str) and index > 0 and index < len(shape):
                implied[dim] = shape[index]
    return implied


def synthesize_inputs(
    specs: list[TensorSpec],
    *,
    batch_size: int,
    dims: dict[str, int] | None = None,
    overrides: dict[str, list[int]] | None = None,
    seed: int = 0,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Random feeds for every input, and deduplicated warnings about defaulted dims.

    Floats are standard normal; int32/int64 are ids in [0, TOKEN_ID_LIMIT), except inputs
    named like "mask" (ones) and "token_type" (zeros); uint8 covers 0..255. Each input's data
    depends only on `seed` and its name, not on the other inputs.
    """
    overrides = overrides or {}
    known = {**dims_from_overrides(specs, overrides), **(dims or {})}
    feeds, warnings = {}, []
    for spec in specs:
        shape, notes = resolve_shape(
            spec, batch_size=batch_size, dims=known, override=overrides.get(spec.name)
        )
        feeds[spec.name] = _fill(spec, shape, seed)
        warnings.extend(notes)
    return feeds, list(dict.fromkeys(warnings))


def _check_batch(spec: TensorSpec, batch_size: int) -> None:
    if batch_size < 1:
        raise InvalidSpec(f"Batch size must be at least 1, not {batch_size}.")
    first = spec.shape[0] if spec.shape else None
    if _is_fixed(first) and first != batch_size:
        raise InvalidSpec(
            f"Input {spec.name!r} has a fixed batch of {first}; batch size {batch_size} "
            "cannot be used.",
            hint=f"Use batch size {first}, or re-export the model with a dynamic batch dim.",
        )


def _resolve_dim(
    spec: TensorSpec, index: int, dim: Dim, batch_size: int, dims: dict[str, int]
) -> tuple[int, str | None]:
    if _is_fixed(dim):
        return dim, None
    if index == 0:
        return batch_size, None
    for key in (f"{spec.name}.{index}", dim):
        if isinstance(key, str) and key in dims:
            return _positive(dims[key], key), None
    # Named dims get one warning for all inputs sharing them, so it does not name the input.
    name = spec.name if dim is None else "NAME"
    label = f"dynamic dim {dim!r}" if dim else f"dynamic dim {index} of input {spec.name!r}"
    how = f"give full shapes with --shape {name}=D1,D2,..."
    return DEFAULT_DYNAMIC_DIM, f"{label} set to {DEFAULT_DYNAMIC_DIM} (default); {how}"


def _apply_override(spec: TensorSpec, override: list[int], batch_size: int) -> tuple[int, ...]:
    expected = [dim if _is_fixed(dim) else "?" for dim in spec.shape]
    fixed_ok = all(
        not _is_fixed(dim) or dim == size for dim, size in zip(spec.shape, override, strict=False)
    )
    if len(override) != len(spec.shape) or not fixed_ok or min(override, default=1) <= 0:
        raise InvalidSpec(
            f"Shape {override} does not fit input {spec.name!r}: expected {expected} "
            f"(rank {len(spec.shape)}, '?' is free).",
        )
    if spec.shape and not _is_fixed(spec.shape[0]):
        return (batch_size, *override[1:])
    return tuple(override)


def _fill(spec: TensorSpec, shape: tuple[int, ...], seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
    dtype, name = spec.dtype, spec.name.lower()
    if dtype not in SUPPORTED_DTYPES:
        raise InvalidSpec(
            f"Cannot synthesize input {spec.name!r} of dtype {dtype!r}. "
            f"Supported: {', '.join(SUPPORTED_DTYPES)}.",
            hint="Provide real input data for this model.",
        )
    if "mask" in name:
        return np.ones(shape, dtype=dtype)
    if "token_type" in name:
        return np.zeros(shape, dtype=dtype)
    if dtype in _FLOATS:
        return rng.standard_normal(shape).astype(dtype)
    if dtype in _INTS:
        return rng.integers(0, TOKEN_ID_LIMIT, size=shape, dtype=dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def _is_fixed(dim: Dim) -> TypeGuard[int]:
    return isinstance(dim, int) and dim > 0


def _positive(size: int, key: str) -> int:
    if size <= 0:
        raise InvalidSpec(f"Dim {key!r} must be a positive size, not {size}.")
    return size
