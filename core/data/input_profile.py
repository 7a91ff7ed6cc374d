"""A model's input profile: how every job feeds it, stored with the model and edited on its card.

A user's model arrives with dynamic dims ('?', -1, 'batch', 'sequence') and inputs that must
hold a valid value (a sample rate). The profile says, once per model, what a job runs it at: a
full shape per input at batch 1 (the batch axis marked), and fixed values: a number, or a
small array (`ArrayValue`, from an .npz; at most MAX_VALUE_ELEMENTS elements, stored as JSON
in the profile like the rest of it: larger arrays go to each job as an inputs file). `propose_profile`
fills it from what is known (real sample arrays, shapes a sample model is known to need, common
conventions) and names every dim it guessed, so the card can say which sizes nobody chose.

Every job applies the stored profile under its own settings (`ModelInputs.over`): what the
job names itself wins (its shapes, dims, values, arrays file); the profile fills the rest. The
batch axis keeps taking each job's batch sizes, so a profile of [1, 3, 48, 320] still sweeps
batches 1..8 of 48x320 text lines.

Each input's batch axis is proposed from its dims: dim 0, or the dim named like the other
inputs' batch, or axis 1 of a state [layers, batch, hidden] (dim 0 fixed, dim 1 dynamic and
named like a batch, or an anonymous dim of an input named like a state); a proposed axis other
than 0 is named in `guessed` with its reason. The user may move it to any axis, or turn it off
(None: the input is run at its full shape whatever the batch). Jobs get the axes that differ
from the inferred ones as their `batch_axes` (see optistudio.core.data.batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.batch import batch_axis, batch_dim_names, check_batch_axes
from optistudio.core.data.declared_dims import fixed_dims_offer
from optistudio.core.data.inputs import (
    DEFAULT_DYNAMIC_DIM,
    ArrayValue,
    InputShapes,
    InputValue,
    InputValues,
    check_arrays,
)
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import TensorSpec

IMAGE_SIDE = 224
"""A dynamic image side, by convention (ImageNet classifiers)."""
TEXT_LINE_HEIGHT = 48
TEXT_LINE_WIDTH = 320
"""The width of a text-line image of fixed height (PP-OCR recognizers: 48x320)."""
SEQUENCE_LENGTH = 128
"""A dynamic token count, by convention (BERT-style encoders)."""
SAMPLE_RATE = 16000
"""A sample-rate input's value, by convention (speech models)."""
AUDIO_SAMPLES = 16000
"""A dynamic audio length: one second at 16 kHz."""

TEXT_RECOGNIZER_KEY = "character"
"""The metadata key PaddleOCR's recognizers carry (their alphabet)."""
_RATE_NAMES = ("sr", "sample_rate", "sampling_rate", "samplerate")
_AUDIO_NAMES = ("audio", "wav", "pcm", "waveform", "input_values", "speech")
_STATE_NAMES = ("state", "hidden", "cache", "h0", "c0", "past")
BATCH_KEY = "batch"
"""`guessed` key suffix of a proposed batch axis: 'state.batch'."""


class InputProfile(BaseModel):
    """What every job runs a model at, unless the job says otherwise."""

    model_config = ConfigDict(extra="forbid")

    shapes: InputShapes = Field(
        default_factory=dict,
        description="A full shape per input at batch 1 (a fixed batch stays as declared).",
    )
    batch_axes: dict[str, int | None] = Field(
        default_factory=dict,
        description="Each input's batch axis (None: run at its full shape whatever the batch).",
    )
    values: InputValues = Field(default_factory=dict)
    guessed: dict[str, str] = Field(
        default_factory=dict,
        description="'INPUT.INDEX' of each dim nobody chose, with why it has its size.",
    )

    def under(self, specs: list[TensorSpec], job: ModelInputs) -> dict[str, Any]:
        """The input fields of `job` (a spec's ModelInputs) with this profile under them: the
        job's own win, the profile fills the rest (`ModelInputs.over` applies them). {} when
        the job gives arrays (they are the inputs). A job with samples of its own
        (`brings_samples`: calibration data) leaves out the sizes the profile guessed, so the
        data's shapes decide them."""
        if job.inputs_file:
            return {}
        guesses = job.brings_samples()
        dims, shapes = self.job_dims(specs, skip_guessed=guesses), self.fixed_shapes(specs)
        return {
            "shapes": {**_without(shapes, job.shapes), **job.shapes},
            "dims": {**_without(dims, _dims_of(specs, job.shapes)), **job.dims},
            "values": {**self.values, **job.values},
            "batch_axes": {**self.moved_axes(specs), **job.batch_axes},
        }

    def moved_axes(self, specs: list[TensorSpec]) -> dict[str, int | None]:
        """The batch axes that differ from the inferred ones (what a job must be told)."""
        names = batch_dim_names(specs)
        return {
            spec.name: self.batch_axes[spec.name]
            for spec in specs
            if spec.name in self.batch_axes
            and self.batch_axes[spec.name] != batch_axis(spec, names)
        }

    def job_dims(self, specs: list[TensorSpec], *, skip_guessed: bool = False) -> dict[str, int]:
        """Sizes of the dynamic dims past each input's batch axis: by name where the dim has
        one (so a job's --dim sequence=64 overrides it), else as 'INPUT.INDEX'."""
        dims: dict[str, int] = {}
        for spec in specs:
            shape, axis = self.shapes.get(spec.name), self.batch_axes.get(spec.name, -1)
            if shape is None or axis is None or len(shape) != len(spec.shape):
                continue
            for index, dim in enumerate(spec.shape):
                if index == axis or isinstance(dim, int):
                    continue
                if skip_guessed and f"{spec.name}.{index}" in self.guessed:
                    continue
                dims.setdefault(
                    dim if isinstance(dim, str) else f"{spec.name}.{index}", shape[index]
                )
        return dims

    def fixed_shapes(self, specs: list[TensorSpec]) -> dict[str, list[int]]:
        """Full shapes of the inputs the profile takes off the batch (batch axis None)."""
        return {
            spec.name: self.shapes[spec.name]
            for spec in specs
            if spec.name in self.shapes
            and spec.name in self.batch_axes
            and self.batch_axes[spec.name] is None
            and spec.dynamic_dims
        }

    def lines(self) -> list[str]:
        """One line per input for a card or a terminal: 'x: [batch, 3, 48, 320] = ...'."""
        out = []
        for name, shape in self.shapes.items():
            axis = self.batch_axes.get(name)
            dims = ["batch" if i == axis else str(size) for i, size in enumerate(shape)]
            line = f"{name}: [{', '.join(dims)}]"
            if name in self.values:
                line += f" = {self.values[name]:g}"
            if axis is None and shape:
                line += " (no batch axis)"
            out.append(line)
        return out


def propose_input_profile(
    specs: list[TensorSpec],
    *,
    known: Mapping[str, list[int]] | None = None,
    arrays: Mapping[str, np.ndarray] | None = None,
    metadata_keys: Iterable[str] = (),
) -> InputProfile:
    """A profile from what is known: `arrays` (real samples, e.g. calibration data: their
    sizes past the batch), `known` full shapes (a sample model's), else conventions for images,
    text lines (a 'character' metadata key marks a PP-OCR recognizer: 48 high), token ids and
    audio, else DEFAULT_DYNAMIC_DIM. Every size not taken from the
    arrays or `known` is named in `guessed` with its reason."""
    arrays = check_arrays(specs, dict(arrays or {}))
    known = dict(known or {})
    text_lines = TEXT_RECOGNIZER_KEY in set(metadata_keys)
    names = batch_dim_names(specs)
    named: dict[str, tuple[int, str | None]] = {}
    for spec in specs:  # a named dim any array or known shape sizes is sized alike everywhere
        source = list(arrays[spec.name].shape) if spec.name in arrays else known.get(spec.name)
        for index, dim in enumerate(spec.shape):
            if isinstance(dim, str) and source is not None and index < len(source):
                named.setdefault(dim, (int(source[index]), None))
    profile = InputProfile()
    for spec in specs:
        axis, why_axis = _proposed_axis(spec, specs, names)
        profile.batch_axes[spec.name] = axis
        if why_axis:
            profile.guessed[f"{spec.name}.{BATCH_KEY}"] = why_axis
        source = list(arrays[spec.name].shape) if spec.name in arrays else known.get(spec.name)
        shape = []
        for index, dim in enumerate(spec.shape):
            if isinstance(dim, int) and dim > 0:
                shape.append(dim)
            elif index == axis:
                shape.append(1)
            elif source is not None and index < len(source):
                shape.append(int(source[index]))
            elif isinstance(dim, str) and dim in named:
                size, why = named[dim]
                shape.append(size)
                if why:
                    profile.guessed[f"{spec.name}.{index}"] = why
            else:
                size, why = _convention(spec, index, text_lines=text_lines)
                shape.append(size)
                profile.guessed[f"{spec.name}.{index}"] = why
                if isinstance(dim, str):
                    named[dim] = (size, why)
        profile.shapes[spec.name] = shape
        value = _conventional_value(spec)
        if value is not None:
            profile.values[spec.name] = value
            profile.guessed[spec.name] = f"{value:g}: a sample-rate input, by convention"
    return profile


def edited_input_profile(
    specs: list[TensorSpec],
    *,
    shapes: Mapping[str, list[int]],
    batch_axes: Mapping[str, int | None],
    values: Mapping[str, InputValue],
    before: InputProfile | None = None,
) -> InputProfile:
    """The profile a user set (on the card, or with the CLI's flags), checked against the
    inputs: each shape fits its input (rank, fixed dims), each value names an input of a
    numeric dtype (an array: its dtype, rank and fixed dims), a batch axis is an axis of its
    input or None. A shape is at batch 1: its size on a dynamic batch axis becomes 1. Dims,
    values and batch axes the user left as `before` guessed them stay marked as guessed."""
    by_name = {spec.name: spec for spec in specs}
    for name in (*shapes, *batch_axes, *values):
        if name not in by_name:
            raise InvalidSpec(
                f"The profile names {name!r}, which is no input of this model. "
                f"Inputs: {sorted(by_name)}.",
                hint="Check the input names on the model card.",
            )
    for name, shape in shapes.items():
        _check_shape(by_name[name], shape)
    check_batch_axes(specs, batch_axes)
    for name, value in values.items():
        _check_value(by_name[name], value)
    guessed = {
        key: why
        for key, why in (before.guessed if before else {}).items()
        if _still_guessed(key, before, shapes, values, batch_axes)
    }
    return InputProfile(
        shapes={
            name: _at_batch_one(by_name[name], list(shape), batch_axes.get(name))
            for name, shape in shapes.items()
        },
        batch_axes=dict(batch_axes),
        values=dict(values),
        guessed=guessed,
    )


def parse_batch_axes(texts: Iterable[str]) -> dict[str, int | None]:
    """'NAME=AXIS' or 'NAME=none' strings (the CLI's --batch-axis) by input name, e.g.
    state=1 for a state [layers, batch, hidden]."""
    axes: dict[str, int | None] = {}
    for text in texts:
        name, sep, axis = text.partition("=")
        word = axis.strip().lower()
        if not sep or not name.strip() or not (word == "none" or word.isdigit()):
            raise InvalidSpec(
                f"Bad --batch-axis {text!r}: expected NAME=AXIS or NAME=none.",
                hint="For example --batch-axis state=1, or --batch-axis state=none",
            )
        axes[name.strip()] = None if word == "none" else int(word)
    return axes


def _check_shape(spec: TensorSpec, shape: list[int]) -> None:
    fits = len(shape) == len(spec.shape) and all(
        size > 0 and (not isinstance(dim, int) or dim <= 0 or dim == size)
        for dim, size in zip(spec.shape, shape, strict=False)
    )
    if not fits:
        expected = [d if isinstance(d, int) and d > 0 else "?" for d in spec.shape]
        raise InvalidSpec(
            f"Shape {list(shape)} does not fit input {spec.name!r}: expected {expected} "
            f"(rank {len(spec.shape)}, '?' is free, sizes positive).",
            hint=fixed_dims_offer(spec, shape),
        )


def _check_value(spec: TensorSpec, value: InputValue) -> None:
    dtype = spec.dtype
    if dtype not in ("float16", "float32", "float64", "int32", "int64", "uint8", "bool"):
        raise InvalidSpec(f"Input {spec.name!r} of dtype {dtype} cannot be given a fixed value.")
    if isinstance(value, ArrayValue):
        check_arrays([spec], {spec.name: value.array()})
    elif not dtype.startswith("float") and value != int(value):
        raise InvalidSpec(f"Input {spec.name!r} is {dtype}; {value:g} is not a whole number.")


def _at_batch_one(spec: TensorSpec, shape: list[int], axis: int | None) -> list[int]:
    """`shape` with 1 on the input's batch axis when that axis is dynamic."""
    if axis is None or axis >= len(shape) or _fixed(spec.shape[axis]):
        return shape
    return [1 if index == axis else size for index, size in enumerate(shape)]


def _proposed_axis(
    spec: TensorSpec, specs: list[TensorSpec], names: frozenset[str]
) -> tuple[int | None, str | None]:
    """The batch axis proposed for `spec`, and why when it is not dim 0."""
    inferred = batch_axis(spec, names)
    if inferred not in (0, None):
        dim = spec.shape[inferred]
        return inferred, (
            f"axis {inferred}: dim {dim!r} is the other inputs' batch "
            "(a state [layers, batch, hidden])"
        )
    if _state_shaped(spec, specs, names):
        return 1, (
            "axis 1: a state [layers, batch, hidden], by convention (dim 0 is fixed, dim 1 "
            "dynamic); set it on the card if it is not"
        )
    return inferred, None


def _state_shaped(spec: TensorSpec, specs: list[TensorSpec], names: frozenset[str]) -> bool:
    """Dim 0 fixed and dim 1 dynamic, named like a batch, or anonymous in an input named like
    a state beside another input with a dynamic batch."""
    shape = spec.shape
    if len(shape) < 2 or not _fixed(shape[0]) or _fixed(shape[1]):
        return False
    dim = shape[1]
    if isinstance(dim, str):
        return "batch" in dim.lower()
    others = [s for s in specs if s is not spec and s.shape and not _fixed(s.shape[0])]
    lowered = spec.name.lower()
    return bool(others) and any(word in lowered for word in _STATE_NAMES)


def _still_guessed(
    key: str,
    before: InputProfile | None,
    shapes: Mapping[str, list[int]],
    values: Mapping[str, InputValue],
    batch_axes: Mapping[str, int | None],
) -> bool:
    """A guessed size, value or batch axis the user left as it was."""
    if before is None:
        return False
    name, _, index = key.rpartition(".")
    if name and index == BATCH_KEY:
        return name in batch_axes and before.batch_axes.get(name) == batch_axes[name]
    if name and index.isdigit():
        old, new = before.shapes.get(name), shapes.get(name)
        return old is not None and new is not None and old[int(index)] == new[int(index)]
    return key in values and before.values.get(key) == values[key]


def _convention(spec: TensorSpec, index: int, *, text_lines: bool) -> tuple[int, str]:
    """The conventional size of a dynamic dim, and the reason the card shows."""
    shape, rank = spec.shape, len(spec.shape)
    floating = spec.dtype.startswith("float")
    if text_lines and floating and rank == 4 and index in (2, 3) and _fixed(shape[1]) == 3:
        size = TEXT_LINE_HEIGHT if index == 2 else TEXT_LINE_WIDTH
        return size, f"{size}: a PP-OCR text recognizer (it lists its characters) reads 48x320"
    if floating and rank == 4 and index in (2, 3) and _fixed(shape[1]) in (1, 3, 4):
        return _image_side(shape, index, (2, 3))
    if floating and rank == 4 and index in (1, 2) and _fixed(shape[3]) in (1, 3, 4):
        return _image_side(shape, index, (1, 2))
    if spec.dtype in ("int32", "int64") and rank == 2 and index == 1:
        return SEQUENCE_LENGTH, f"{SEQUENCE_LENGTH}: a token sequence, by convention"
    lowered = spec.name.lower()
    if floating and rank == 2 and index == 1 and any(word in lowered for word in _AUDIO_NAMES):
        return AUDIO_SAMPLES, f"{AUDIO_SAMPLES}: one second of 16 kHz audio, by convention"
    return DEFAULT_DYNAMIC_DIM, f"{DEFAULT_DYNAMIC_DIM}: the default for a dynamic dim"


def _image_side(shape: list[Any], index: int, sides: tuple[int, int]) -> tuple[int, str]:
    other = shape[sides[1] if index == sides[0] else sides[0]]
    if index == sides[1] and _fixed(other) and other <= 64:
        return TEXT_LINE_WIDTH, f"{TEXT_LINE_WIDTH}: a text line {other} high, by convention"
    return IMAGE_SIDE, f"{IMAGE_SIDE}: an image side, by convention"


def _conventional_value(spec: TensorSpec) -> float | None:
    scalar = not spec.shape or spec.shape == [1]
    name = spec.name.lower()
    if scalar and spec.dtype in ("int32", "int64", "float32") and name in _RATE_NAMES:
        return float(SAMPLE_RATE)
    return None


def _fixed(dim: Any) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def _without(mapping: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any]:
    drop = set(keys)
    return {key: value for key, value in mapping.items() if key not in drop}


def _dims_of(specs: list[TensorSpec], shapes: Mapping[str, list[int]]) -> set[str]:
    """Dim keys a job's own full shapes size: the profile must not size them differently."""
    keys = set()
    for spec in specs:
        if spec.name in shapes:
            for index, dim in enumerate(spec.shape):
                keys.add(dim if isinstance(dim, str) else f"{spec.name}.{index}")
    return keys
