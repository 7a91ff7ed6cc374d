"""The sizes to try for an input profile's guessed dims when the guesses do not run.

A guessed dim is one the profile names in `guessed` and nobody gave since (no full shape, no
--dim, no array for its input). Dims that must agree are tried together (`SizeUnit`): a named
dim shared by inputs is one dim, and an image's two sides are one unit, kept square unless the
proposal was not (a 48x320 text line keeps its height and tries other widths). Each unit's
candidates, the proposal first:

1. sizes the model implies (`ImpliedSizes`): its metadata (imgsz, image_size, ...), fixed sizes
   of its other inputs (an image's sides, or the size at the same axis of an input of the
   same rank), a Resize to constant sizes, a Reshape to a constant element count that a square
   image of the input's channels fills exactly (count = C x S x S);
2. the proposal rounded up to a multiple of the model's stride (metadata 'stride', else 32);
3. image sides 224, 256, 320, 416, 512, 640; other dims 128, 64, 256, 32.

`assignments` zips the units: the n-th assignment takes each unit's n-th candidate (its proposal
once it has no more), so a model with an image and a token input tries both at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optistudio.core.data.input_profile import InputProfile
from optistudio.core.data.inputs import ArrayValue, dims_from_overrides
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.model.declared_sizes import small_int_constants
from optistudio.core.model.info import TensorSpec

COMMON_SIDES = (224, 256, 320, 416, 512, 640)
"""Image sides tried after the implied ones (classifiers, then detectors)."""
SEQUENCE_LENGTHS = (128, 64, 256, 32)
"""Lengths tried for a dim that is not an image side (token sequences first)."""
STRIDE = 32
"""The multiple detectors' sides must be, unless the metadata names another stride."""
SIDE_RANGE = (8, 4096)
"""Implied sides outside this range are not sides (a Reshape to a count of 1, a vocabulary)."""
_SIZE_KEYS = ("imgsz", "image_size", "img_size", "imgsize", "input_size", "image_shape")
_IMAGE_CHANNELS = (1, 3, 4)


@dataclass(frozen=True)
class GuessedDim:
    """One size the profile guessed that nobody gave: a dim name, or one input's 'INPUT.INDEX'."""

    key: str
    members: tuple[tuple[str, int], ...]
    """(input, axis) of every dim it sizes: each input holding the name."""
    size: int


@dataclass(frozen=True)
class SizeUnit:
    """Guessed dims tried together, and their candidates (a size per dim, the proposal first)."""

    input: str
    dims: tuple[GuessedDim, ...]
    candidates: tuple[tuple[int, ...], ...]
    image_axes: tuple[int, ...] = ()
    """The axes of `input` the dims are, when they are image sides (height first)."""


@dataclass(frozen=True)
class ImpliedSizes:
    """What the model says about its sizes without being run."""

    sides: tuple[tuple[int, int], ...] = ()
    """(height, width) an image input may need, most telling first."""
    stride: int = STRIDE
    at_axis: Mapping[tuple[int, int], tuple[int, ...]] = field(default_factory=dict)
    """Fixed sizes of the inputs by (rank, axis), for the other inputs' dims."""


def guessed_dims(
    specs: list[TensorSpec], profile: InputProfile, given: ModelInputs
) -> list[GuessedDim]:
    """The dims `profile` guessed that `given` (the job's own inputs) leaves to it; none when
    the job gives an inputs file."""
    if given.inputs_file:
        return []
    by_name = {spec.name: spec for spec in specs}
    implied = dims_from_overrides(specs, dict(given.shapes))
    found: dict[str, GuessedDim] = {}
    for key in profile.guessed:
        name, _, index = key.rpartition(".")
        spec, shape = by_name.get(name), profile.shapes.get(name)
        if spec is None or shape is None or not index.isdigit() or len(shape) != len(spec.shape):
            continue
        axis = int(index)
        if axis >= len(shape) or _fixed(spec.shape[axis]) or _given(spec, axis, given, implied):
            continue
        dim = spec.shape[axis]
        found.setdefault(
            dim if isinstance(dim, str) else key,
            GuessedDim(
                key=dim if isinstance(dim, str) else key,
                members=_members(specs, profile, spec, axis),
                size=shape[axis],
            ),
        )
    return list(found.values())


def size_units(
    specs: list[TensorSpec], dims: list[GuessedDim], implied: ImpliedSizes
) -> list[SizeUnit]:
    """The guessed dims grouped as they are tried (an image's two sides together)."""
    by_name = {spec.name: spec for spec in specs}
    at = {member: dim for dim in dims for member in dim.members}
    units: list[SizeUnit] = []
    used: set[str] = set()
    for dim in dims:
        if dim.key in used:
            continue
        name, axis = dim.members[0]
        sides = image_sides(by_name[name])
        if sides is not None and axis in sides:
            together, axes = _sides_together(name, sides, at, used)
            units.append(_image_unit(name, together, axes, sides, implied))
        else:
            together = (dim,)
            units.append(_other_unit(name, dim, len(by_name[name].shape), axis, implied))
        used |= {d.key for d in together}
    return units


def _sides_together(
    name: str, sides: tuple[int, int], at: Mapping[tuple[str, int], GuessedDim], used: set[str]
) -> tuple[tuple[GuessedDim, ...], tuple[int, ...]]:
    """The guessed dims of an image's sides (one when both sides share a name), and their axes."""
    dims: list[GuessedDim] = []
    axes: list[int] = []
    for side in sides:
        dim = at.get((name, side))
        if dim is not None and dim.key not in used and dim not in dims:
            dims.append(dim)
            axes.append(side)
    return tuple(dims), tuple(axes)


def assignments(units: list[SizeUnit], limit: int) -> list[dict[str, int]]:
    """At most `limit` distinct assignments (dim key -> size), the proposal first."""
    longest = max((len(unit.candidates) for unit in units), default=0)
    found: list[dict[str, int]] = []
    for index in range(longest):
        sizes: dict[str, int] = {}
        for unit in units:
            chosen = unit.candidates[index] if index < len(unit.candidates) else unit.candidates[0]
            sizes.update({dim.key: size for dim, size in zip(unit.dims, chosen, strict=True)})
        if sizes not in found:
            found.append(sizes)
        if len(found) == limit:
            break
    return found


def implied_sizes(
    model_path: Path | None, specs: list[TensorSpec], metadata: Mapping[str, str]
) -> ImpliedSizes:
    """The sizes the metadata, the fixed input dims and the graph's constants imply."""
    channels = {c for spec in specs if (c := _channels(spec)) is not None}
    sides = [
        *_metadata_sides(metadata),
        *_fixed_sides(specs),
        *(_graph_sides(model_path, channels) if model_path is not None else ()),
    ]
    stride = _first_int(metadata.get("stride", ""))
    return ImpliedSizes(
        sides=tuple(dict.fromkeys(s for s in sides if all(_a_side(v) for v in s))),
        stride=stride if stride and 1 < stride <= 128 else STRIDE,
        at_axis=_fixed_at_axis(specs),
    )


def image_sides(spec: TensorSpec) -> tuple[int, int] | None:
    """(height axis, width axis) of an image input (float, rank 4, 1/3/4 channels), else None."""
    if not spec.dtype.startswith("float") or len(spec.shape) != 4:
        return None
    if _fixed(spec.shape[1]) in _IMAGE_CHANNELS:
        return 2, 3
    if _fixed(spec.shape[3]) in _IMAGE_CHANNELS:
        return 1, 2
    return None


def unit_label(unit: SizeUnit, sizes: Mapping[str, int]) -> str:
    """'224' (a square, or one dim), '48x256' (an image's two sides that differ)."""
    chosen = [sizes[dim.key] for dim in unit.dims]
    if len(set(chosen)) == 1:
        return str(chosen[0])
    return "x".join(map(str, chosen))


def _image_unit(
    name: str,
    dims: tuple[GuessedDim, ...],
    axes: tuple[int, ...],
    sides: tuple[int, int],
    implied: ImpliedSizes,
) -> SizeUnit:
    proposal = tuple(dim.size for dim in dims)
    which = [sides.index(axis) for axis in axes]  # 0: height, 1: width
    candidates = [proposal]
    candidates += [tuple(side[i] for i in which) for side in implied.sides]
    candidates.append(tuple(_round_up(size, implied.stride) for size in proposal))
    if len(proposal) == 2 and proposal[0] != proposal[1]:  # a text line keeps its height
        candidates += [(proposal[0], side) for side in COMMON_SIDES]
    else:
        candidates += [tuple(side for _ in proposal) for side in COMMON_SIDES]
    return SizeUnit(name, dims, tuple(dict.fromkeys(candidates)), image_axes=axes)


def _other_unit(
    name: str, dim: GuessedDim, rank: int, axis: int, implied: ImpliedSizes
) -> SizeUnit:
    sizes = [dim.size, *implied.at_axis.get((rank, axis), ()), *SEQUENCE_LENGTHS]
    return SizeUnit(name, (dim,), tuple(dict.fromkeys((size,) for size in sizes)))


def _members(
    specs: list[TensorSpec], profile: InputProfile, spec: TensorSpec, axis: int
) -> tuple[tuple[str, int], ...]:
    """Every (input, axis) a guessed dim sizes: all inputs holding its name, off their batch."""
    dim = spec.shape[axis]
    if not isinstance(dim, str):
        return ((spec.name, axis),)
    return tuple(
        (other.name, index)
        for other in specs
        if other.name in profile.shapes
        for index, each in enumerate(other.shape)
        if each == dim and index != profile.batch_axes.get(other.name, -1)
    )


def _given(spec: TensorSpec, axis: int, given: Any, implied: Mapping[str, int]) -> bool:
    """Whether the job sizes this dim itself (its input's shape or array, or the dim)."""
    dim, dims = spec.shape[axis], given.dims
    if spec.name in given.shapes or isinstance(given.values.get(spec.name), ArrayValue):
        return True
    if f"{spec.name}.{axis}" in dims:
        return True
    return isinstance(dim, str) and (dim in dims or dim in implied)


def _metadata_sides(metadata: Mapping[str, str]) -> Iterator[tuple[int, int]]:
    for key, value in metadata.items():
        if key.lower() in _SIZE_KEYS:
            numbers = [int(n) for n in re.findall(r"\d+", value)]
            if len(numbers) >= 2:
                yield numbers[-2], numbers[-1]
            elif numbers:
                yield numbers[0], numbers[0]


def _fixed_sides(specs: list[TensorSpec]) -> Iterator[tuple[int, int]]:
    """The sides of image inputs whose sides are fixed (a second image fixes the first's)."""
    for spec in specs:
        sides = image_sides(spec)
        if sides is not None:
            height, width = (_fixed(spec.shape[axis]) for axis in sides)
            if height and width:
                yield height, width


def _fixed_at_axis(specs: list[TensorSpec]) -> dict[tuple[int, int], tuple[int, ...]]:
    found: dict[tuple[int, int], list[int]] = {}
    for spec in specs:
        for axis, dim in enumerate(spec.shape):
            size = _fixed(dim)
            if axis > 0 and size and size > 1:
                found.setdefault((len(spec.shape), axis), []).append(size)
    return {key: tuple(dict.fromkeys(sizes)) for key, sizes in found.items()}


def _graph_sides(model_path: Path, channels: set[int]) -> list[tuple[int, int]]:
    """Sides a Resize to constant sizes names, or a Reshape's constant element count fills."""
    import onnx

    try:
        graph = onnx.load(str(model_path), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - a hint only; the run itself tells what is wrong
        return []
    constants = _small_int_constants(graph)
    sides: list[tuple[int, int]] = []
    for node in graph.node:
        if node.op_type == "Resize" and len(node.input) > 3 and node.input[3] in constants:
            sizes = constants[node.input[3]]
            if len(sizes) == 4:
                sides.append((sizes[2], sizes[3]))
        elif node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] in constants:
            sides += _squares_filling(constants[node.input[1]], channels)
    return sides


def _squares_filling(shape: list[int], channels: Iterable[int]) -> list[tuple[int, int]]:
    """Square sides S with C x S x S equal to the element count of a constant shape."""
    if not shape or min(shape) <= 0:
        return []
    count, found = math.prod(shape), []
    for channel in channels:
        side = math.isqrt(count // channel)
        if count % channel == 0 and side * side * channel == count:
            found.append((side, side))
    return found


def _small_int_constants(graph: Any) -> dict[str, list[int]]:
    """INT64 vectors of at most 8 values stored in the graph (initializers, Constant nodes)."""
    return {name: v for name, v in small_int_constants(graph).items() if len(v) <= 8}


def _channels(spec: TensorSpec) -> int | None:
    sides = image_sides(spec)
    if sides is None:
        return None
    return _fixed(spec.shape[1 if sides == (2, 3) else 3])


def _first_int(text: str) -> int | None:
    match = re.search(r"\d+", text)
    return int(match.group()) if match else None


def _round_up(size: int, multiple: int) -> int:
    return -(-size // multiple) * multiple


def _a_side(size: int) -> bool:
    return SIDE_RANGE[0] <= size <= SIDE_RANGE[1]


def _fixed(dim: Any) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None
