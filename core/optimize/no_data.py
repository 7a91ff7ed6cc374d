"""What a run feeds when the user gives no data: built-in samples, else random inputs.

Built-in samples (optistudio.core.data.builtin) are real images, text, token ids, speech-like
audio or bytes in the shapes random inputs would have. When every model input has a set, the variants are
judged on the sets' samples of seed 0 and the INT8 passes calibrate on those of seed 1 (other
crops, other lines, other clips), so no variant is calibrated on the samples that judge it. An
image input's normalisation is the one the model states (dtype, graph, metadata), else its
family's (PP-OCR: -1..1 for lines, ImageNet for pages), else the one under which the FP32
model's outputs on PROBE_SAMPLES samples look most confident and not saturated
(`scaling.pick`), else its layout's convention. An audio input gets built-in speech-like audio
at the rate the model states or its length implies, as samples or as the log-mel or STFT
frames its shape declares (optistudio.core.data.builtin.audio_inputs). When some input has no set, the run keeps
random inputs (the SyntheticDataset), and `RunData.why_random` says which input has none.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from optistudio.core.backends import LoadedModel, SessionOptions, get_backend
from optistudio.core.data.builtin import scaling
from optistudio.core.data.builtin.dataset import BuiltinDataset, Plan, plan
from optistudio.core.data.builtin.kinds import InputSet
from optistudio.core.data.builtin.photos import photographs
from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import OptistudioError
from optistudio.core.numerics.samples import fed_rows

log = logging.getLogger(__name__)

PROBE_SAMPLES = 8
LOGIT_TASKS = frozenset({"classification", "ctc_text"})
"""Tasks whose judged scores read as class probabilities through a softmax."""
CALIBRATION_SEED = 1
Scalings = dict[str, tuple[ImagePreprocessing, str]]


@dataclass(frozen=True)
class RunData:
    """What a run judges its variants on (the user's data, built-in samples or random inputs),
    and what its INT8 passes calibrate on when that is other samples."""

    judged: CalibrationSource
    calibration: CalibrationSource | None = None
    """The INT8 passes' own samples; None: they calibrate on `judged` (random inputs)."""
    why_random: str = ""
    """Why the run feeds random inputs (the input with no built-in set); '' otherwise."""

    @property
    def description(self) -> str:
        if self.calibration is None:
            return self.judged.description
        return f"{self.judged.description}; INT8 calibrated on other samples of the same sets"


def without_data(
    model: Path, base: SyntheticDataset, task: str | None, output: str | None = None
) -> RunData:
    """Built-in samples shaped as `base` when every input has a set, else `base` itself
    (random inputs) and why (module docstring)."""
    proto = onnx.load(str(model), load_external_data=False)
    found = _covered(plan(base, proto, task))
    if found.missing:
        log.info("no built-in samples: %s", found.missing)
        return RunData(base, why_random=found.missing)
    scalings = {
        name: image_scaling(model, proto, base, found.sets, name, (task, output))
        for name, chosen in found.sets.items()
        if chosen.layout is not None
    }
    return RunData(
        BuiltinDataset(base, found.sets, model=proto, scalings=scalings),
        BuiltinDataset(base, found.sets, model=proto, scalings=scalings, seed=CALIBRATION_SEED),
    )


def image_scaling(
    model: Path,
    proto: onnx.ModelProto,
    base: SyntheticDataset,
    sets: dict[str, InputSet],
    name: str,
    judged: tuple[str | None, str | None],
) -> tuple[ImagePreprocessing, str]:
    """The normalisation of image input `name`, and why (`scaling`, steps 1-6); `judged`:
    the task and the output it judges, whose confidence picks among the candidates."""
    dtype = next(spec.dtype for spec in base.inputs if spec.name == name)
    stated = scaling.stated(proto, name, dtype) or scaling.family_scaling(
        proto, name, sets[name].kind
    )
    if stated is not None:
        return _as_input(base, sets, name, stated[0]), stated[1]
    candidates = {
        key: _as_input(base, sets, name, norm) for key, norm in scaling.CANDIDATES.items()
    }
    try:
        picked = _probe(model, proto, base, sets, name, candidates, judged)
    except OptistudioError as exc:
        log.info("normalisation probe failed: %s", exc)
        picked = None
    if picked is None:
        return _default(base, sets, name)
    return candidates[picked[0]], f"{picked[0]} ({picked[1]})"


def _as_input(
    base: SyntheticDataset, sets: dict[str, InputSet], name: str, norm: scaling.Normalisation
) -> ImagePreprocessing:
    """`norm` for image input `name`: its layout, channels (1: gray) and dtype."""
    layout = str(sets[name].layout)
    first = next(iter(base.batches()))[name]
    channels = first.shape[1] if layout == "NCHW" else first.shape[3]
    dtype = next(spec.dtype for spec in base.inputs if spec.name == name)
    return scaling.preprocessing(norm, layout=layout, channels=channels, dtype=dtype)


def _default(
    base: SyntheticDataset, sets: dict[str, InputSet], name: str
) -> tuple[ImagePreprocessing, str]:
    norm, why = scaling.default_for(str(sets[name].layout))
    return _as_input(base, sets, name, norm), why


def _probe(
    model: Path,
    proto: onnx.ModelProto,
    base: SyntheticDataset,
    sets: dict[str, InputSet],
    name: str,
    candidates: dict[str, ImagePreprocessing],
    judged: tuple[str | None, str | None],
) -> tuple[str, str] | None:
    """Run the FP32 model on PROBE_SAMPLES samples under each candidate (`scaling.pick`)."""
    loaded = get_backend("onnxruntime").load(model, SessionOptions())
    try:
        names = [value.name for value in proto.graph.output]
        task, output = judged
        index = names.index(output) if output in names else 0
        others = {n: _default(base, sets, n) for n, found in sets.items() if found.layout}
        outputs = {
            key: _sample_outputs(loaded, base, sets, others | {name: (pre, key)}, index)
            for key, pre in candidates.items()
        }
    finally:
        loaded.close()
    return scaling.pick(outputs, logits=task in LOGIT_TASKS)


def _sample_outputs(
    loaded: LoadedModel,
    base: SyntheticDataset,
    sets: dict[str, InputSet],
    scalings: Scalings,
    index: int,
) -> list[np.ndarray]:
    """Output `index` of the first PROBE_SAMPLES samples, one row per sample."""
    probe = BuiltinDataset(base, sets, scalings=scalings)
    rows: list[np.ndarray] = []
    for batch in _first_batches(probe):
        fed = fed_rows(batch, base.inputs, base.batch_axes)
        out = np.asarray(loaded.run(batch)[index])
        rows += list(out) if out.ndim and out.shape[0] == fed else [out]
    return rows


def _first_batches(dataset: BuiltinDataset) -> Iterator[dict[str, np.ndarray]]:
    count = math.ceil(PROBE_SAMPLES / max(1, dataset.batch_size))
    return itertools.islice(dataset.batches(), count)


def _covered(found: Plan) -> Plan:
    """The plan, or missing when a set needs photographs and none are installed."""
    needs_photos = any(chosen.kind == "photos" for chosen in found.sets.values())
    if needs_photos and not photographs():
        return Plan(missing="no bundled photographs are installed (scikit-learn ships two)")
    return found
