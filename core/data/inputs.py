"""Synthetic inputs for a model: concrete shapes for dynamic dims, and data to fill them.

What the user said wins. An input given as an array (`arrays`, from an .npz) is used as given;
an input given a full shape (`overrides`, the CLI's --shape) is run at exactly that shape. Only
the other inputs follow the batch size: their batch axis is dim 0, or, when dim 0 is fixed, a
dim named like another input's dynamic dim 0 (a state [layers, 'batch', hidden] beside an
audio ['batch', 'time']: ONNX gives one symbolic name one size). A dynamic batch axis takes
`batch_size`; a fixed dim 0 is a fixed batch, so any other batch size is an error. Other
dynamic dims take the size the user named (by symbolic name like "sequence", or "INPUT.INDEX"
like "input_ids.1"), else DEFAULT_DYNAMIC_DIM with a warning. A full shape also sizes the dims
its input shares by name with others, the batch too: given input_ids [1, 128], an
attention_mask ['batch', 'sequence'] is [1, 128] and no longer swept. When no input is left to
sweep, the batch is the one the shapes imply (see optistudio.core.data.batch). A batch axis
the user set (`batch_axes`, e.g. {'state': 1}) wins over the inferred one. A fixed value
(`values`, the CLI's --value, e.g. a sample rate) fills its input, in the input's dtype; a
fixed array (`ArrayValue`, from an .npz: --value NAME=@FILE.npz) is one request's value of the
input, repeated along its batch axis to the batch size.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Annotated, Any, TypeGuard

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from optistudio.core.data.batch import (
    BatchAxes,
    batch_axes_of,
    batch_axis,
    batch_dim_name,
    batch_dim_names,
    batch_of,
    check_batch_axes,
    pinned_batches,
)
from optistudio.core.data.declared_dims import fixed_dims_offer
from optistudio.core.data.feed_budget import allocating, check_feed_budget
from optistudio.core.data.npy_headers import check_budget, npz_headers
from optistudio.core.errors import DataMismatch, InvalidSpec
from optistudio.core.model.info import Dim, TensorSpec

DEFAULT_DYNAMIC_DIM = 16
"""Size of a dynamic dim other than the batch (a sequence length, an image side) when unset."""

InputShapes = Annotated[
    dict[str, list[int]],
    Field(description="Full input shapes by input name, e.g. {'input_ids': [1, 128]}."),
]
"""The shapes field of every spec that feeds a model (declare it with default_factory=dict)."""
NamedDims = Annotated[
    dict[str, int], Field(description="Sizes of named dynamic dims, e.g. {'sequence': 128}.")
]
"""The dims field of every spec that feeds a model (declare it with default_factory=dict)."""
MAX_VALUE_ELEMENTS = 4096
"""Most elements a fixed array value holds: it is stored as JSON with the profile and with
every job's spec, so larger arrays belong in an inputs file (--inputs FILE.npz)."""
_FLOATS = ("float16", "float32", "float64")
_INTS = ("int32", "int64")
SUPPORTED_DTYPES = (*_FLOATS, *_INTS, "bool", "uint8")


class ArrayValue(BaseModel):
    """A fixed value that is a small array (e.g. a streaming model's initial state), stored
    as JSON: dtype, shape and the elements in C order."""

    model_config = ConfigDict(extra="forbid")

    dtype: str = Field(description="numpy dtype name, e.g. 'float32'")
    shape: list[int] = Field(description="the array's shape, e.g. [2, 1, 64]")
    data: list[Any] = Field(description="the elements, flattened in C order")

    @model_validator(mode="after")
    def _consistent(self) -> ArrayValue:
        if self.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {', '.join(SUPPORTED_DTYPES)}")
        if min(self.shape, default=1) < 0 or len(self.data) != int(np.prod(self.shape)):
            raise ValueError(f"{len(self.data)} elements do not fill shape {self.shape}")
        if len(self.data) > MAX_VALUE_ELEMENTS:
            raise ValueError(f"{len(self.data)} elements, more than {MAX_VALUE_ELEMENTS}")
        try:
            np.asarray(self.data, dtype=self.dtype)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"the elements are not all {self.dtype} values") from None
        return self

    @classmethod
    def of(cls, name: str, array: np.ndarray) -> ArrayValue:
        """The stored form of `array`; InvalidSpec when it is over MAX_VALUE_ELEMENTS."""
        if array.size > MAX_VALUE_ELEMENTS:
            raise InvalidSpec(
                f"The array for input {name!r} has {array.size} elements {list(array.shape)}; "
                f"a fixed value holds at most {MAX_VALUE_ELEMENTS}.",
                hint="Give larger arrays to each job as an inputs file (--inputs FILE.npz).",
            )
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            raise InvalidSpec(
                f"The array for input {name!r} holds NaN or infinity, which JSON cannot store.",
                hint="Give finite values, or pass the array to each job with --inputs FILE.npz.",
            )
        return cls(dtype=str(array.dtype), shape=list(array.shape), data=array.ravel().tolist())

    def array(self) -> np.ndarray:
        return np.asarray(self.data, dtype=self.dtype).reshape(self.shape)

    def __format__(self, spec: str) -> str:
        """'float32 [2, 1, 64] array' (a number's format spec is ignored)."""
        return f"{self.dtype} {self.shape} array"


InputValue = float | ArrayValue
"""A fixed value: a number filling the input, or one request's array of it."""
InputValues = Annotated[
    dict[str, InputValue],
    Field(
        description="Fixed values by input name, e.g. {'sr': 16000}: the input is filled with "
        "the value, in its dtype and shape; or an array (dtype, shape, data) of one request's "
        "value, repeated along the input's batch axis."
    ),
]
"""The values field of every spec that feeds a model (declare it with default_factory=dict)."""
InputsFile = Annotated[
    str | None,
    Field(
        description="An .npz of arrays by input name, used as those inputs exactly as given "
        "(their shapes are the shapes); empty = synthesised inputs."
    ),
]
"""The inputs_file field of every spec that feeds a model (declare it with default None)."""

BatchAxesField = Annotated[
    dict[str, int | None],
    Field(
        description="Batch axes by input name where the inferred one is wrong, e.g. "
        "{'state': 1} for a state [layers, batch, hidden]; null: no batch axis."
    ),
]
"""The batch_axes field of every spec that feeds a model (declare it with default_factory=dict)."""

TOKEN_ID_LIMIT = 100
"""Integer inputs are drawn from [0, TOKEN_ID_LIMIT): valid ids for any real vocabulary."""
_NORMAL_CHUNK = 1 << 20


def resolve_shape(
    spec: TensorSpec,
    *,
    batch_size: int,
    dims: dict[str, int],
    override: list[int] | None = None,
    batch_names: Collection[str] = (),
    axes: BatchAxes | None = None,
) -> tuple[tuple[int, ...], list[str]]:
    """The concrete shape of one input and warnings about dims that fell back to defaults.

    `override` (a full shape) is used exactly; its rank and fixed dims must match. Otherwise the
    batch axis (`batch_axis`, given the model's `batch_names`) takes `batch_size`. Raises
    InvalidSpec for a batch size a fixed batch refuses.
    """
    if override is not None:
        return _apply_override(spec, override), []
    axis = batch_axis(spec, batch_names, axes)
    _check_batch(spec, batch_size, axis)
    shape, warnings = [], []
    for index, dim in enumerate(spec.shape):
        taken = index == axis or (isinstance(dim, str) and dim in batch_names)
        size, warning = _resolve_dim(spec, index, dim, batch_size if taken else None, dims)
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
    values: dict[str, InputValue] | None = None,
    arrays: dict[str, np.ndarray] | None = None,
    batch_axes: BatchAxes | None = None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Feeds for every input, and deduplicated warnings about defaulted dims.

    `arrays` are used as given (checked against the inputs), `values` fill their inputs (an
    ArrayValue is repeated along the input's batch axis to `batch_size`), and
    the rest is random: floats standard normal; int32/int64 ids in [0, TOKEN_ID_LIMIT), except
    inputs named like "mask" (ones) and "token_type" (zeros); uint8 covers 0..255. Each input's
    data depends only on `seed` and its name, not on the other inputs, and is made in its own
    dtype. Raises InvalidSpec, before making any, when the inputs to make would hold more than
    the budget of optistudio.core.data.feed_budget, and when an allocation fails.
    """
    check_batch_axes(specs, batch_axes)
    values = _check_values(specs, values or {})
    fixed = _fixed_arrays(specs, values, batch_size, batch_axes, overrides or {})
    values = {name: value for name, value in values.items() if name not in fixed}
    arrays = {**fixed, **check_arrays(specs, arrays or {})}
    overrides = {**(overrides or {}), **shapes_of(arrays)}
    known = {**dims_from_overrides(specs, overrides), **(dims or {})}
    names = batch_dim_names(specs, batch_axes)
    pinned = pinned_batches(specs, overrides, batch_axes)
    shapes, warnings = {}, []
    for spec in specs:
        if spec.name in arrays:
            continue
        shapes[spec.name], notes = resolve_shape(
            spec,
            batch_size=pinned.get(batch_dim_name(spec, names, batch_axes), batch_size),
            dims=known,
            override=overrides.get(spec.name),
            batch_names=names,
            axes=batch_axes,
        )
        warnings.extend(notes)
    by_name = {spec.name: spec for spec in specs}
    check_feed_budget({name: (by_name[name].dtype, shape) for name, shape in shapes.items()})
    feeds = {
        spec.name: arrays[spec.name]
        if spec.name in arrays
        else _made(spec, shapes[spec.name], values.get(spec.name), seed)
        for spec in specs
    }
    return feeds, list(dict.fromkeys(warnings))


def shapes_of(arrays: dict[str, np.ndarray]) -> dict[str, list[int]]:
    """The full shape of each array, by input name."""
    return {name: list(array.shape) for name, array in arrays.items()}


def sample_dims(specs: list[TensorSpec], feeds: dict[str, np.ndarray]) -> dict[str, int]:
    """Sizes of the dynamic dims past the batch in real data, as "INPUT.INDEX" dims.

    Synthetic inputs made with them have the data's shapes at any batch size, e.g. text lines
    of 48x320 rather than the default 16x16."""
    dims = {}
    for spec in specs:
        shape = feeds[spec.name].shape if spec.name in feeds else ()
        for index, dim in enumerate(spec.shape[1 : len(shape)], start=1):
            if not _is_fixed(dim):
                dims[f"{spec.name}.{index}"] = int(shape[index])
    return dims


def requests_batch(
    specs: list[TensorSpec],
    batch_size: int,
    *,
    shapes: dict[str, list[int]] | None = None,
    dims: dict[str, int] | None = None,
    values: dict[str, InputValue] | None = None,
    arrays: dict[str, np.ndarray] | None = None,
    seed: int = 0,
    batch_axes: BatchAxes | None = None,
) -> dict[str, np.ndarray]:
    """Feeds of `batch_size` requests for a server that stacks them on each input's batch axis
    (the batching tuner's): `shapes` and `arrays` describe one request, and an input whose
    batch axis is dynamic gets `batch_size` rows on it (the request's rows repeated); the rest
    as `synthesize_inputs`."""
    check_batch_axes(specs, batch_axes)
    dynamic = {
        name: axis
        for name, axis in batch_axes_of(specs, batch_axes).items()
        if axis is not None and not _is_fixed(_dim(specs, name, axis))
    }
    rows = {
        name: _repeat(array, batch_size, dynamic[name])
        if name in dynamic and array.ndim > dynamic[name]
        else array
        for name, array in check_arrays(specs, arrays or {}).items()
    }
    grown = {
        name: _at(shape, dynamic[name], batch_size) if name in dynamic else list(shape)
        for name, shape in (shapes or {}).items()
    }
    feeds, _ = synthesize_inputs(
        specs,
        batch_size=batch_size,
        dims=dims,
        overrides=grown,
        seed=seed,
        values=values,
        arrays=rows,
        batch_axes=batch_axes,
    )
    return feeds


def _dtype_of(specs: list[TensorSpec], name: str) -> str:
    return next(spec.dtype for spec in specs if spec.name == name)


def _dim(specs: list[TensorSpec], name: str, axis: int) -> Dim:
    shape = next(spec.shape for spec in specs if spec.name == name)
    return shape[axis] if axis < len(shape) else None


def _repeat(array: np.ndarray, count: int, axis: int) -> np.ndarray:
    """`count` rows along `axis`, the array's own rows repeated in turn."""
    if array.shape[axis] == 0:
        return array
    return np.take(array, np.arange(count) % array.shape[axis], axis=axis)


def _at(shape: list[int], axis: int, size: int) -> list[int]:
    return [size if index == axis else dim for index, dim in enumerate(shape)]


def read_input_arrays(path: str | Path | None, specs: list[TensorSpec]) -> dict[str, np.ndarray]:
    """The arrays of an .npz by input name (the CLI's --inputs), checked; {} for no file.

    Raises DataMismatch for a file that cannot be read, arrays that do not fit the inputs, and
    arrays whose headers declare more than the array budget (npy_headers), before loading any.
    """
    if not path:
        return {}
    check_budget(npz_headers(Path(path), f"The inputs file {Path(path).name!r}").values())
    try:
        with np.load(Path(path), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError) as exc:
        raise DataMismatch(
            f"Cannot read the inputs file {Path(path).name!r}: {exc}",
            hint="Save one array per input with np.savez(path, **{input_name: array}).",
        ) from None
    return check_arrays(specs, arrays)


def check_arrays(specs: list[TensorSpec], arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`arrays` when each names an input and fits its dtype, rank and fixed dims."""
    by_name = {spec.name: spec for spec in specs}
    for name, array in arrays.items():
        spec = by_name.get(name)
        if spec is None:
            raise DataMismatch(
                f"Array {name!r} names no input of the model. Inputs: {sorted(by_name)}.",
                hint="Name each array after the input it feeds.",
            )
        fits = array.ndim == len(spec.shape) and all(
            not _is_fixed(dim) or dim == size
            for dim, size in zip(spec.shape, array.shape, strict=True)
        )
        if array.dtype != np.dtype(spec.dtype) or not fits:
            raise DataMismatch(
                f"Array {name!r} is {array.dtype} {list(array.shape)}; input {name!r} expects "
                f"{spec.dtype} {[d if _is_fixed(d) else '?' for d in spec.shape]}.",
                hint=f"Save it as array.astype('{spec.dtype}') in the input's shape.",
            )
    return arrays


def _fixed_arrays(
    specs: list[TensorSpec],
    values: dict[str, InputValue],
    batch_size: int,
    axes: BatchAxes | None,
    overrides: dict[str, list[int]],
) -> dict[str, np.ndarray]:
    """The inputs given an ArrayValue, as arrays: repeated along the batch axis to
    `batch_size` when the array holds one row there (and no full shape says otherwise)."""
    batch = batch_axes_of(specs, axes)
    arrays = {}
    for name, value in values.items():
        if not isinstance(value, ArrayValue):
            continue
        array, axis = value.array().astype(_dtype_of(specs, name)), batch[name]
        one_row = axis is not None and array.ndim > axis and array.shape[axis] == 1
        if one_row and name not in overrides and batch_size != 1:
            array = _repeat(array, batch_size, axis)
        arrays[name] = array
    return arrays


def _check_values(specs: list[TensorSpec], values: dict[str, InputValue]) -> dict[str, InputValue]:
    by_name = {spec.name: spec for spec in specs}
    for name, value in values.items():
        spec = by_name.get(name)
        if spec is None:
            raise InvalidSpec(
                f"Value given for unknown input {name!r}. Inputs: {sorted(by_name)}.",
                hint="Check the input names on the model card.",
            )
        if spec.dtype not in SUPPORTED_DTYPES:
            raise InvalidSpec(
                f"Cannot fill input {name!r} of dtype {spec.dtype!r} with a value. "
                f"Supported: {', '.join(SUPPORTED_DTYPES)}."
            )
        if isinstance(value, ArrayValue):
            check_arrays(specs, {name: value.array().astype(spec.dtype)})
        elif spec.dtype not in _FLOATS and value != int(value):
            raise InvalidSpec(f"Input {name!r} is {spec.dtype}; {value:g} is not a whole number.")
    return values


def _check_batch(spec: TensorSpec, batch_size: int, axis: int | None) -> None:
    if batch_size < 1:
        raise InvalidSpec(f"Batch size must be at least 1, not {batch_size}.")
    fixed = spec.shape[axis] if axis is not None and axis < len(spec.shape) else None
    if _is_fixed(fixed) and fixed != batch_size:
        raise InvalidSpec(
            f"Input {spec.name!r} has a fixed batch of {fixed} (axis {axis}); batch size "
            f"{batch_size} cannot be used.",
            hint=f"Use batch size {fixed}, set its batch axis (--batch-axis NAME=K), or "
            "re-export the model with a dynamic batch dim.",
        )


def _resolve_dim(
    spec: TensorSpec, index: int, dim: Dim, batch_size: int | None, dims: dict[str, int]
) -> tuple[int, str | None]:
    """`batch_size` is given when this dim is the input's batch axis or shares its name."""
    if _is_fixed(dim):
        return dim, None
    if batch_size is not None:
        return batch_size, None
    for key in (f"{spec.name}.{index}", dim):
        if isinstance(key, str) and key in dims:
            return _positive(dims[key], key), None
    # Named dims get one warning for all inputs sharing them, so it does not name the input.
    name = spec.name if dim is None else "NAME"
    label = f"dynamic dim {dim!r}" if dim else f"dynamic dim {index} of input {spec.name!r}"
    how = f"give full shapes with --shape {name}=D1,D2,..."
    return DEFAULT_DYNAMIC_DIM, f"{label} set to {DEFAULT_DYNAMIC_DIM} (default); {how}"


def _apply_override(spec: TensorSpec, override: list[int]) -> tuple[int, ...]:
    expected = [dim if _is_fixed(dim) else "?" for dim in spec.shape]
    fixed_ok = all(
        not _is_fixed(dim) or dim == size for dim, size in zip(spec.shape, override, strict=False)
    )
    if len(override) != len(spec.shape) or not fixed_ok or min(override, default=1) <= 0:
        raise InvalidSpec(
            f"Shape {override} does not fit input {spec.name!r}: expected {expected} "
            f"(rank {len(spec.shape)}, '?' is free).",
            hint=fixed_dims_offer(spec, override),
        )
    return tuple(override)


def _made(
    spec: TensorSpec, shape: tuple[int, ...], value: InputValue | None, seed: int
) -> np.ndarray:
    """The input filled with its fixed number (array values are among the arrays by now), or
    random data; made in the input's dtype, a MemoryError told as a sentence."""
    with allocating(spec.name, spec.dtype, shape):
        if isinstance(value, float | int):
            return _full(spec, shape, value)
        return _fill(spec, shape, seed)


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
        return _normal(rng, shape, np.dtype(dtype))
    if dtype in _INTS:
        return rng.integers(0, TOKEN_ID_LIMIT, size=shape, dtype=dtype)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape, dtype=np.uint8).view(bool)
    return rng.integers(0, 256, size=shape, dtype=np.uint8)


def _normal(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Standard normal values made in `dtype` (float16, which numpy does not draw in, is filled
    from float32 draws _NORMAL_CHUNK values at a time): never a float64 copy of the input."""
    if dtype != np.float16:
        return rng.standard_normal(shape, dtype=dtype)
    values = np.empty(shape, dtype=dtype)
    flat = values.reshape(-1)
    for start in range(0, flat.size, _NORMAL_CHUNK):
        count = min(_NORMAL_CHUNK, flat.size - start)
        flat[start : start + count] = rng.standard_normal(count, dtype=np.float32)
    return values


def _full(spec: TensorSpec, shape: tuple[int, ...], value: float) -> np.ndarray:
    if spec.dtype in _FLOATS:
        return np.full(shape, value, dtype=spec.dtype)
    return np.full(shape, np.array(int(value)).astype(spec.dtype), dtype=spec.dtype)


def _is_fixed(dim: Dim) -> TypeGuard[int]:
    return isinstance(dim, int) and dim > 0


def _positive(size: int, key: str) -> int:
    if size <= 0:
        raise InvalidSpec(f"Dim {key!r} must be a positive size, not {size}.")
    return size


def user_inputs(
    specs: list[TensorSpec],
    *,
    batch_size: int,
    dims: dict[str, int],
    shapes: dict[str, list[int]],
    values: dict[str, InputValue],
    inputs_file: str | Path | None,
    seed: int = 0,
    batch_axes: BatchAxes | None = None,
) -> tuple[dict[str, np.ndarray], int, list[str]]:
    """The inputs one run feeds: the user's arrays, shapes and values, the rest synthesised;
    their batch size (the one asked, or the one full shapes imply); warnings about dims."""
    arrays = read_input_arrays(inputs_file, specs)
    feeds, warnings = synthesize_inputs(
        specs,
        batch_size=batch_size,
        dims=dims,
        overrides=shapes,
        seed=seed,
        values=values,
        arrays=arrays,
        batch_axes=batch_axes,
    )
    batch = batch_of(specs, {**shapes, **shapes_of(arrays)}, batch_size, batch_axes)
    return feeds, batch, warnings
