"""The export bundle's `litert/` part: one .tflite per precision the converter could make.

Made with the same converter as the LiteRT passes (onnx2tf + TensorFlow in a child process,
`optistudio.core.backends.litert_convert`), from the bundle's ONNX model: FP32, FP16 weights and
dynamic-range INT8, which need no data. Full-integer INT8 needs calibration data, which a bundle
does not have: make it with `optistudio optimize MODEL --target litert` (recipe litert_int8) and
export that variant. Where the converter is not installed, the part is skipped with the extra to
install; a precision that fails to convert is tried once more from the model at the job's
static shapes (`optistudio.core.report.static_shapes`: the profile's, batch 1, checked against
the original first), and skipped with both reasons when that fails too.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optistudio.core.backends.litert_convert import (
    INSTALL_HINT,
    LiteRtPrecision,
    convert_many,
    converter_versions,
    missing_converter,
)
from optistudio.core.backends.litert_convert import PRECISIONS as PRECISIONS_ALL
from optistudio.core.errors import OptistudioError
from optistudio.core.model.info import ModelInfo
from optistudio.core.report.skip_reasons import sentence
from optistudio.core.report.static_shapes import profile_shapes, shown, static_copy

PRECISIONS: tuple[LiteRtPrecision, ...] = ("fp32", "fp16", "int8_dynamic")
RUNS_ON = (
    "LiteRT (TensorFlow Lite): Android, iOS, Linux and microcontroller builds; the "
    "ai-edge-litert interpreter (XNNPACK) on a desktop CPU"
)


@dataclass
class LiteRtExport:
    """What the litert/ part holds: files made (precision -> path) and precisions skipped."""

    files: dict[str, Path] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    static_shapes: dict[str, str] = field(default_factory=dict)
    """Precision -> why its file was made from the model at the job's static shapes."""


def export_litert(
    model: Path,
    info: ModelInfo,
    folder: Path,
    *,
    name: str,
    input_profile: dict[str, Any] | None = None,
    precisions: list[str] | tuple[str, ...] = PRECISIONS,
) -> LiteRtExport:
    """Convert `model` to `folder/<name>_<precision>.tflite` for each precision it can."""
    missing = missing_converter()
    if missing:
        reason = sentence(f"{missing} on this worker", INSTALL_HINT)
        return LiteRtExport(skipped=dict.fromkeys(precisions, reason))
    outs = {p: folder / f"{name}_{p}.tflite" for p in _known(precisions)}
    outcome = convert_many(model, outs, shapes=fixed_shapes(info, input_profile))
    made = LiteRtExport(versions=converter_versions())
    for precision, answer in outcome.items():
        if answer.get("ok"):
            made.files[precision] = outs[precision]
        else:
            made.skipped[precision] = skip_reason(answer.get("error"))
    if made.skipped:
        _retry_static(model, info, input_profile, {p: outs[p] for p in made.skipped}, made)
    return made


def _retry_static(
    model: Path,
    info: ModelInfo,
    input_profile: dict[str, Any] | None,
    outs: dict[LiteRtPrecision, Path],
    made: LiteRtExport,
) -> None:
    """Convert the precisions the dynamic graph did not once more, from the model at the job's
    static shapes (`static_shapes`): a file made says so in `made.static_shapes`, a precision
    still refused gives both reasons."""
    shapes = profile_shapes(info, input_profile)
    with tempfile.TemporaryDirectory(prefix="optistudio-litert-static-") as work:
        try:
            static = static_copy(model, info, shapes, Path(work) / "static.onnx")
        except OptistudioError as exc:
            for precision in outs:
                made.skipped[precision] += f" At the static shapes {shown(shapes)}: {exc.message}"
            return
        outcome = convert_many(static, outs, shapes=shapes)
    for precision, answer in outcome.items():
        dynamic = made.skipped.pop(precision)
        if answer.get("ok"):
            made.files[precision] = outs[precision]
            made.static_shapes[precision] = (
                f"converted from the model at the static shapes {shown(shapes)}, checked against "
                f"it first: the dynamic graph did not convert ({dynamic})"
            )
        else:
            again = skip_reason(answer.get("error"))
            made.skipped[precision] = f"{dynamic} At the static shapes {shown(shapes)}: {again}"


CONVERTER = "onnx2tf and TensorFlow's TFLite converter"


def skip_reason(error: object) -> str:
    """The converter's answer as a sentence (the bundle's line names the precision): 'onnx2tf
    and TensorFlow's TFLite converter could not convert this model: axes don't match array
    (ValueError).' The child may report 'ValueError: ...', or the bare text."""
    text = str(error or "").strip() or "it stopped without saying why"
    kind, _, rest = text.partition(": ")
    named = kind.isidentifier() and kind.endswith(("Error", "Exception")) and bool(rest)
    what = f"{CONVERTER} could not convert this model"
    return sentence(what, rest if named else text, kind=kind if named else None)


def _known(precisions: list[str] | tuple[str, ...]) -> list[LiteRtPrecision]:
    return [p for p in PRECISIONS_ALL if p in precisions]


def fixed_shapes(info: ModelInfo, profile: dict[str, Any] | None) -> dict[str, list[int]]:
    """Batch-1 shapes from the input profile for inputs with an open dim past the batch."""
    shapes = (profile or {}).get("shapes") or {}
    found = {}
    for tensor in info.inputs:
        if (
            any(not isinstance(d, int) or d <= 0 for d in tensor.shape[1:])
            and tensor.name in shapes
        ):
            found[tensor.name] = [1, *[int(d) for d in shapes[tensor.name][1:]]]
    return found
