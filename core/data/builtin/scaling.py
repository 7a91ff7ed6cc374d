"""How built-in images become a model's input values: 0..1, -1..1, ImageNet-normalised...

An ONNX file rarely says how its images were normalised, so the choice is made, in order, from:

1. the input's dtype: an integer image (uint8) takes raw pixels 0..255;
2. the graph: when the image input's first consumer (past Cast / Transpose) is a Sub, Add, Mul
   or Div by a constant, the model normalises itself, and the constant says from what: a Div
   by c >= 2, a Mul by c <= 0.5 or a Sub / Add of |c| >= 2 (255, 1/255, 123.7) works on pixels
   0..255; a smaller Sub / Add (0.485) on pixels / 255, 0..1;
3. the metadata: keys naming a mean and a std (image_mean, mean_values...), 1 or 3 numbers each,
   in pixel units when the mean exceeds 1, else after / 255; a key naming the colour order
   ('BGR') sets it;
4. the family: where the graph shows a family whose pre-processing is known, its own, ahead of
   any confidence (`family_scaling`). PP-OCR (a PaddlePaddle / paddle2onnx producer, or the
   'character' alphabet in the metadata, or an input named x whose output has the classes of a
   PP-OCR alphabet: 97, 6625, 18385 or 18710): its recognizers and direction classifiers read a
   text line as (pixel / 255 - 0.5) / 0.5, -1..1; its text detectors ImageNet mean/std. A
   line the FP32 recognizer reads more confidently under another range is still fed -1..1:
   confidence on rendered lines is a weak signal, the family's training pipeline a strong one;
5. else the FP32 model's own outputs on a few samples under each of CANDIDATES (`pick`; a
   classifier's or a CTC recognizer's scores through a softmax when they are logits): a
   candidate whose outputs vary across samples much less than the others' is saturated (its
   responsiveness, 1 - the mean cosine between samples' outputs, under 3/4 of the candidates'
   median) and dropped; among the rest the most confident wins (`confidence`), a candidate
   within TIE (0.005) of the best counting as a tie that the earlier one wins;
6. with no output to read confidence from (an embedding, a regression): ImageNet for NCHW
   (torchvision's convention), -1..1 for NHWC (TF-slim's and Keras MobileNet's).

Colour order is RGB unless the metadata says BGR: the samples' channels are not searched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from optistudio.core.data.images import ImagePreprocessing


@dataclass(frozen=True)
class Normalisation:
    """x = (pixel * scale - mean[c]) / std[c] per channel c, in `color` order."""

    scale: float = 1 / 255
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    std: tuple[float, ...] = (1.0, 1.0, 1.0)
    color: str = "RGB"


IMAGENET = Normalisation(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
CANDIDATES: dict[str, Normalisation] = {
    "-1..1": Normalisation(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5)),
    "ImageNet mean/std": IMAGENET,
    "0..1": Normalisation(),
}
"""Normalisations tried on the FP32 model, in the order ties go: -1..1 first, the middle of the
three ranges ([-1, 1] between [0, 1] and ImageNet's [-2.1, 2.6]), so that when confidence
cannot tell them apart a model trained on either neighbour sees at most twice or half its
range. Raw pixels 0..255 are not among them: larger inputs make larger logits, which look
confident whatever the model was trained on, so they are only taken where the graph or the
metadata says so."""
PADDLE_PRODUCERS = ("paddle",)
"""Producer names of Paddle exports: 'PaddlePaddle', 'paddle2onnx'."""
PPOCR_ALPHABET_KEY = "character"
PADDLE_INPUT = "x"
PPOCR_CLASSES = frozenset({97, 6625, 18385, 18710})
"""The classes of PP-OCR's recognizers, the blank and a space included: English 97, Chinese
(v1 to v4) 6625, v5 18385, v6 18710."""
PPOCR_RANGES = {"text lines": "-1..1", "text pages": "ImageNet mean/std"}
PPOCR_ROLES = {"text lines": "recognizers and direction classifiers", "text pages": "detectors"}
PIXELS = Normalisation(scale=1.0)
UNIT = Normalisation()
PASS_THROUGH = ("Cast", "Transpose")
SELF_NORMALISING = ("Sub", "Add", "Mul", "Div")
SATURATED = 0.75
TIE = 0.005
ROUNDING = 1e-5
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE]-?\d+)?")


def preprocessing(
    norm: Normalisation, *, layout: str, channels: int, dtype: str
) -> ImagePreprocessing:
    """The ImagePreprocessing of `norm` for an input of `channels` (1: gray, the means of its
    mean and std), its `layout` and `dtype`."""
    gray = channels == 1
    return ImagePreprocessing.model_validate(
        {
            "layout": layout,
            "color": "GRAY" if gray else norm.color,
            "scale": norm.scale,
            "mean": (float(np.mean(norm.mean)),) if gray else norm.mean,
            "std": (float(np.mean(norm.std)),) if gray else norm.std,
            "dtype": dtype,
        }
    )


def stated(model: onnx.ModelProto, input_name: str, dtype: str) -> tuple[Normalisation, str] | None:
    """The normalisation the dtype, the graph or the metadata state (steps 1-3), and why."""
    if np.dtype(dtype).kind in "iu":
        return PIXELS, f"0..255 (a {dtype} input takes raw pixels)"
    found = graph_scaling(model, input_name)
    return found if found is not None else metadata_scaling(model)


def graph_scaling(model: onnx.ModelProto, input_name: str) -> tuple[Normalisation, str] | None:
    """Step 2: the first consumer normalising the input, read as 0..255 or 0..1 input."""
    node = _first_consumer(model.graph, input_name)
    if node is None or node.op_type not in SELF_NORMALISING:
        return None
    constant = _constant_operand(model.graph, node)
    if constant is None or constant.size == 0:
        return None
    size = float(np.max(np.abs(constant)))
    pixels = {"Div": size >= 2, "Mul": 0 < size <= 0.5}.get(node.op_type, size >= 2)
    shown = np.round(constant.ravel()[:3], 4).tolist()
    why = f"the graph normalises its input itself: {node.op_type} by {shown} first"
    return (PIXELS, f"0..255 ({why})") if pixels else (UNIT, f"0..1 ({why})")


def metadata_scaling(model: onnx.ModelProto) -> tuple[Normalisation, str] | None:
    """Step 3: a mean and a std (and a colour order) from the model's metadata."""
    props = {prop.key.lower(): prop.value for prop in model.metadata_props}
    mean = next((_numbers(v) for k, v in props.items() if "mean" in k and _numbers(v)), None)
    std = next((_numbers(v) for k, v in props.items() if "std" in k and _numbers(v)), None)
    if not mean or not std or len(mean) not in (1, 3) or len(std) not in (1, 3):
        return None
    bgr = any("bgr" in v.lower() for k, v in props.items() if "color" in k or "order" in k)
    norm = Normalisation(
        scale=1.0 if max(mean) > 1 else 1 / 255,
        mean=tuple(mean * (3 // len(mean))),
        std=tuple(std * (3 // len(std))),
        color="BGR" if bgr else "RGB",
    )
    return norm, f"mean {mean}, std {std} (the model's metadata{', BGR' if bgr else ''})"


def family_scaling(
    model: onnx.ModelProto, input_name: str, kind: str
) -> tuple[Normalisation, str] | None:
    """Step 4: the normalisation the model's family feeds an input of built-in `kind` ('text
    lines', 'text pages'), and why; None when no family is shown or it has no rule for it."""
    family = ppocr_evidence(model, input_name)
    if family is None or kind not in PPOCR_RANGES:
        return None
    key = PPOCR_RANGES[kind]
    norm = CANDIDATES[key]
    return norm, f"{key} (PP-OCR's {PPOCR_ROLES[kind]} feed it; {family})"


def ppocr_evidence(model: onnx.ModelProto, input_name: str) -> str | None:
    """What shows the model is a PP-OCR export, in words; None when nothing does."""
    producer = model.producer_name.lower()
    if any(word in producer for word in PADDLE_PRODUCERS):
        return f"the graph's producer is {model.producer_name!r}"
    if any(prop.key == PPOCR_ALPHABET_KEY for prop in model.metadata_props):
        return f"the metadata holds PaddleOCR's {PPOCR_ALPHABET_KEY!r} alphabet"
    classes = _last_dim(model.graph.output[0]) if model.graph.output else None
    if input_name == PADDLE_INPUT and classes in PPOCR_CLASSES:
        return f"input {PADDLE_INPUT!r} and {classes} output classes, a PP-OCR alphabet's"
    return None


def _last_dim(value: onnx.ValueInfoProto) -> int | None:
    dims = value.type.tensor_type.shape.dim
    return int(dims[-1].dim_value) if dims and dims[-1].HasField("dim_value") else None


def default_for(layout: str) -> tuple[Normalisation, str]:
    """Step 5: the convention of the layout's usual exporters."""
    if layout == "NCHW":
        return IMAGENET, "ImageNet mean/std (no output shows confidence; torchvision's, for NCHW)"
    return CANDIDATES["-1..1"], "-1..1 (no output shows confidence; TF-slim's, for NHWC)"


def pick(
    outputs: dict[str, Sequence[np.ndarray]], *, logits: bool = False
) -> tuple[str, str] | None:
    """Step 4: the candidate whose per-sample outputs are most confident and not saturated,
    and why; None when no candidate's outputs show a confidence (`logits`: read scores that
    are not probabilities through a softmax, for a classifier's or a CTC recognizer's)."""
    scores = {name: confidence(rows, logits=logits) for name, rows in outputs.items()}
    if any(score is None for score in scores.values()):
        return None
    moving = {name: responsiveness(rows) for name, rows in outputs.items()}
    floor = SATURATED * float(np.median(list(moving.values())))
    kept = [name for name in outputs if moving[name] >= floor] or list(outputs)
    best = max(scores[name] or 0.0 for name in kept)
    chosen = next(name for name in kept if (scores[name] or 0.0) >= best - TIE)
    shown = ", ".join(f"{name} {scores[name]:.3f}" for name in outputs)
    dropped = [name for name in outputs if name not in kept]
    saturated = f"; saturated: {', '.join(dropped)}" if dropped else ""
    count = len(next(iter(outputs.values())))
    return chosen, f"the FP32 outputs most confident on {count} samples: {shown}{saturated}"


def confidence(rows: Sequence[np.ndarray], *, logits: bool = False) -> float | None:
    """How sure outputs look: the mean top probability along the last axis (probabilities as
    given; with `logits`, other scores through a softmax), or for values in [0, 1] that do not
    sum to 1 (sigmoid maps) the mean |2p - 1|; None for other outputs (embeddings...)."""
    values = np.concatenate([np.asarray(row, dtype=np.float64).ravel() for row in rows])
    last = np.asarray(rows[0]).shape[-1] if np.asarray(rows[0]).ndim else 1
    if values.size == 0 or not np.all(np.isfinite(values)):
        return None
    table = values.reshape(-1, last)
    unit = table.min() >= -ROUNDING and table.max() <= 1 + ROUNDING  # a sigmoid's 1.0000001
    if unit and last > 1 and np.allclose(table.sum(axis=1), 1, atol=1e-3):
        return float(table.max(axis=1).mean())
    if unit:
        return float(np.abs(2 * table - 1).mean())
    if logits and last > 1:
        shifted = np.exp(table - table.max(axis=1, keepdims=True))
        return float((shifted.max(axis=1) / shifted.sum(axis=1)).mean())
    return None


def responsiveness(rows: Sequence[np.ndarray]) -> float:
    """1 - the mean cosine between different samples' outputs: 0 when every sample gets the
    same output (a saturated network), larger the more the outputs follow the inputs."""
    flat = np.stack([np.asarray(row, dtype=np.float64).ravel() for row in rows])
    if len(flat) < 2:
        return 0.0
    unit = flat / np.maximum(np.linalg.norm(flat, axis=1, keepdims=True), 1e-12)
    cosines = (unit @ unit.T)[np.triu_indices(len(flat), 1)]
    return float(1 - cosines.mean())


def _first_consumer(graph: onnx.GraphProto, name: str) -> onnx.NodeProto | None:
    for node in graph.node:
        if name in node.input:
            if node.op_type in PASS_THROUGH:
                return _first_consumer(graph, node.output[0])
            return node
    return None


def _constant_operand(graph: onnx.GraphProto, node: onnx.NodeProto) -> np.ndarray | None:
    tables = {init.name: init for init in graph.initializer}
    made = {out: n for n in graph.node if n.op_type == "Constant" for out in n.output}
    for name in node.input:
        if name in tables and not tables[name].external_data:
            return numpy_helper.to_array(tables[name]).astype(np.float64)
        if name in made and made[name].attribute:
            value = onnx.helper.get_attribute_value(made[name].attribute[0])
            if isinstance(value, onnx.TensorProto):
                return numpy_helper.to_array(value).astype(np.float64)
    return None


def _numbers(text: str) -> list[float]:
    return [float(number) for number in _NUMBER.findall(text)]
