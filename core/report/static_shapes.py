"""The export converters' second try: the model at the job's static shapes, checked first.

Converters that rebuild a graph in another framework (onnx2tf for LiteRT, the torch bridge and
coremltools for Core ML) stop at what a dynamic graph computes from its own sizes: a Squeeze of
dynamic rank, a Reshape whose target comes from Shape ops. The job knows the shapes it feeds (the
input profile's, batch 1), as OpenVINO's static fallback does
(`optistudio.core.backends.openvino_static`). So when the dynamic graph does not convert, the
export retries once on a static copy: every input declared at those shapes, and what those
shapes then fix folded into constants by ONNX Runtime's basic graph level (a Shape, the Gather
and Range computed from it, a Squeeze's rank), which writes standard ONNX ops only. The copy
is run by ONNX Runtime beside the original at those shapes and used only when every output
agrees (the FP32 tolerance); the bundle says that the format was made at those shapes and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx

from optistudio.core.backends.reference import reference_session
from optistudio.core.data.input_profile import InputProfile, propose_input_profile
from optistudio.core.data.inputs import synthesize_inputs
from optistudio.core.errors import PassFailed, first_line
from optistudio.core.model.info import ModelInfo
from optistudio.core.numerics.crosscheck import check_outputs, reference_outputs


def profile_shapes(info: ModelInfo, input_profile: dict[str, Any] | None) -> dict[str, list[int]]:
    """Every input's full shape at batch 1: the input profile's, else the one Optistudio
    would propose for the model."""
    profile = (
        InputProfile.model_validate(input_profile)
        if input_profile
        else propose_input_profile(info.inputs, metadata_keys=info.metadata_keys)
    )
    shapes = {name: list(shape) for name, shape in profile.shapes.items() if shape}
    feeds, _ = synthesize_inputs(
        info.inputs, batch_size=1, overrides=shapes, values=profile.values or None
    )
    return {name: list(array.shape) for name, array in feeds.items()}


def shown(shapes: dict[str, list[int]]) -> str:
    """'x=[1, 3, 224, 224], h0=[4, 1, 64]'."""
    return ", ".join(f"{name}={shape}" for name, shape in shapes.items())


def static_copy(model_path: Path, info: ModelInfo, shapes: dict[str, list[int]], out: Path) -> Path:
    """`model_path` with its inputs declared at `shapes` and what they then fix folded
    (ONNX Runtime's basic level: constant folding, Shape ops of known shapes included), written
    to `out` and checked against the original on ONNX Runtime at those shapes; PassFailed when
    it does not agree or does not run."""
    model = onnx.load(str(model_path))
    for value in model.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            del dims[:]
            for size in shapes[value.name]:
                dims.add().dim_value = int(size)
    del model.graph.value_info[:]
    declared = out.with_name(f"{out.stem}_declared.onnx")
    onnx.save(model, str(declared))
    try:
        reference_session(declared, optimization="basic", quiet=True, optimized_model=out)
    except Exception as exc:  # the runtime raises its own untyped errors
        raise PassFailed(
            f"The model at the static shapes {shown(shapes)} does not load: {first_line(exc)}"
        ) from exc
    _check_copy(model_path, out, info, shapes)
    return out


def _check_copy(original: Path, copy: Path, info: ModelInfo, shapes: dict[str, list[int]]) -> None:
    feeds, _ = synthesize_inputs(info.inputs, batch_size=1, overrides=shapes)
    try:
        produced = list(reference_outputs(copy, feeds))
    except Exception as exc:  # the runtime raises its own untyped errors
        raise PassFailed(
            f"The model at the static shapes {shown(shapes)} does not run: {first_line(exc)}"
        ) from exc
    names = [tensor.name for tensor in info.outputs]
    check = check_outputs(names, reference_outputs(original, feeds), produced, precision="fp32")
    if not check.passed:
        raise PassFailed(f"The model at the static shapes {shown(shapes)}: {check.summary}.")
