"""`BuiltinDataset`: built-in samples in the shapes the run feeds, as a `CalibrationSource`.

The shapes, dtypes and the inputs without a set of their own (masks, token types, the user's
values and arrays) come from a `SyntheticDataset` made with the run's settings, so built-in
samples are fed exactly where random ones would be: each batch is the synthetic batch with every
input that has a set (`kinds.input_set`) filled with samples first+0, first+1, ... of that set
along its batch axis, `first` counting the samples fed before. Sample i of a set depends only on
(seed, i): the dataset is the same on every pass, and another seed gives other samples.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx

from optistudio.core.data.batch import batch_axis, batch_dim_names
from optistudio.core.data.builtin.audio_inputs import rate_input
from optistudio.core.data.builtin.audio_samples import audio_filler_parts
from optistudio.core.data.builtin.files import byte_window, padding_for
from optistudio.core.data.builtin.kinds import InputSet, input_set
from optistudio.core.data.builtin.photos import describe_photographs, photo_crop
from optistudio.core.data.builtin.rendered import fonts_described, text_line, text_page
from optistudio.core.data.builtin.tokens import id_limit, token_row, vocab_size
from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.data.images import ImagePreprocessing, preprocess

PREFIX = "built-in samples"
"""How every built-in dataset's description starts."""
IMAGES: dict[str, Callable[..., object]] = {
    "photos": photo_crop,
    "text lines": text_line,
    "text pages": text_page,
}


@dataclass(frozen=True)
class Plan:
    """The set each input gets, or why the model has no built-in samples."""

    sets: dict[str, InputSet] = field(default_factory=dict)
    missing: str = ""
    """'' when every input is covered; else which input has no set, in words."""


def plan(base: SyntheticDataset, model: onnx.ModelProto | None, task: str | None) -> Plan:
    """Each input's set at the shapes of `base`'s first batch (`kinds.input_set`)."""
    first = next(iter(base.batches()))
    given = set(base.values) | set(base.arrays)
    rate = rate_input(base.inputs, base.values)
    sets = {}
    for spec in base.inputs:
        shape = tuple(first[spec.name].shape)
        found = input_set(
            spec, shape, model=model, task=task, given=spec.name in given, rate_input=rate
        )
        if found is None:
            return Plan(
                missing=f"input {spec.name!r} ({spec.dtype} {list(shape)}) has no "
                "built-in set (images, text, token ids, audio, recurrent states and bytes have one)"
            )
        sets[spec.name] = found
    return Plan(sets)


class BuiltinDataset:
    """Built-in samples fed in the shapes of `base` (module docstring)."""

    synthetic = False
    builtin = True

    def __init__(
        self,
        base: SyntheticDataset,
        sets: dict[str, InputSet],
        *,
        model: onnx.ModelProto | None = None,
        scalings: dict[str, tuple[ImagePreprocessing, str]] | None = None,
        seed: int = 0,
    ) -> None:
        self.base = base
        self.inputs = base.inputs
        self.batch_axes = base.batch_axes
        self.batch_size = base.batch_size
        self.seed = seed
        self.scalings = dict(scalings or {})
        self._fillers = {
            name: _filler(found, model, self.scalings.get(name), seed)
            for name, found in sets.items()
            if found.kind != "given"
        }
        self._sets = sets

    def __len__(self) -> int:
        return len(self.base)

    @property
    def description(self) -> str:
        parts = [self._described(name) for name in self._fillers]
        return f"{PREFIX}: " + "; ".join(parts) + f", batch {self.batch_size}"

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        names = batch_dim_names(self.inputs, self.batch_axes)
        axes = {spec.name: batch_axis(spec, names, self.batch_axes) for spec in self.inputs}
        first = 0
        for batch in self.base.batches():
            rows = 1
            for name, fill in self._fillers.items():
                batch[name], rows = fill.batch(batch[name], axes[name], first)
            first += rows
            yield batch

    def _described(self, name: str) -> str:
        fill = self._fillers[name]
        scaling = self.scalings.get(name)
        how = f", {_scaling_text(scaling[0])} {scaling[1]}" if scaling else ""
        return f"{name}: {len(self)} {fill.what}{how}"


@dataclass(frozen=True)
class _Filler:
    """Makes one input's samples: `make(index, sample shape)` -> one sample's array."""

    what: str
    make: Callable[[int, tuple[int, ...]], np.ndarray]

    def batch(self, like: np.ndarray, axis: int | None, first: int) -> tuple[np.ndarray, int]:
        """An array shaped like `like` (and of its dtype) of samples first, first + 1, ...
        along `axis`; and how many samples that is."""
        if axis is None:
            return self.make(first, like.shape).astype(like.dtype), 1
        rows = like.shape[axis]
        sample = like.shape[:axis] + like.shape[axis + 1 :]
        made = [self.make(first + row, sample) for row in range(rows)]
        return np.stack(made, axis=axis).astype(like.dtype), rows


def _filler(
    found: InputSet,
    model: onnx.ModelProto | None,
    scaling: tuple[ImagePreprocessing, str] | None,
    seed: int,
) -> _Filler:
    if found.kind in IMAGES:
        if scaling is None:
            raise ValueError(f"image input {found.name!r} needs its scaling")
        return _image_filler(found, scaling[0], seed)
    if found.kind == "token ids":
        vocab, where = id_limit(model, found.name)
        what = f"rows of sentences from Python's docstrings, words hashed to ids ({where}; no "
        return _Filler(
            what + "tokenizer is known, so not the ids the model's own would give)",
            lambda i, shape: token_row(i, int(np.prod(shape)), vocab, seed).reshape(shape),
        )
    if found.kind == "positions":
        return _Filler(
            "position ids 0, 1, ... along each row",
            lambda i, shape: np.broadcast_to(np.arange(shape[-1]), shape).copy(),
        )
    if found.kind == "bytes":
        pad = padding_for(vocab_size(model, found.name) if model is not None else None)
        return _Filler(
            "byte windows of standard-library files (.py sources, .so extensions)",
            lambda i, shape: byte_window(i, int(np.prod(shape)), pad, seed).reshape(shape),
        )
    if found.kind == "state":
        return _Filler(
            "zeros (a recurrent state, as a stream starts)",
            lambda i, shape: np.zeros(shape, np.float32),
        )
    if found.audio is None:
        raise ValueError(f"audio input {found.name!r} needs its form and rate")
    if found.kind == "rate":
        rate = found.audio.rate
        return _Filler(f"copies of the sample rate, {rate}", lambda i, shape: np.full(shape, rate))
    return _Filler(*audio_filler_parts(found.audio, seed))


def _image_filler(found: InputSet, pre: ImagePreprocessing, seed: int) -> _Filler:
    content = IMAGES[found.kind]
    nchw = found.layout == "NCHW"
    pre = pre.model_copy(update={"layout": found.layout})  # the input's, whatever was given

    def make(index: int, shape: tuple[int, ...]) -> np.ndarray:
        size = (shape[1], shape[2]) if nchw else (shape[0], shape[1])
        return preprocess(content(index, size, seed), pre, size)  # type: ignore[arg-type]

    return _Filler(_image_words(found.kind), make)


def _image_words(kind: str) -> str:
    if kind == "photos":
        return f"crops of {describe_photographs()}"
    where = f"in {fonts_described()}, words from Python's docstrings"
    return f"rendered {kind} ({where})"


def _scaling_text(pre: ImagePreprocessing) -> str:
    return f"{pre.layout} {pre.color}"
