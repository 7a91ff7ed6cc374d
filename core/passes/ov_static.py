"""The model as an OpenVINO IR fixed at its run's input shapes (static shapes).

OpenVINO's CPU plugin compiles a graph whose every dim is known into faster code than the same
graph with dynamic dims, fed the same inputs: at one thread on seven of the zoo's models with '?'
dims (bench/ov_static_shapes.py, docs/BENCHMARKS.md) BF16 ran 1-32 % faster fixed and FP32 0-47 %
(a PP-OCR direction classifier [?, 3, ?, ?] the most), while fixing every dim but the batch won
almost nothing. A user who serves at known shapes gets that by reshaping the model before
compiling it (`model.reshape(...)`); `ov.convert_model(path)`, OpenVINO's default, keeps the
file's dynamic dims.

The pass takes an ONNX file (converted as int8_nncf_ov converts it, older opsets through opset
13) or an IR another pass made (NNCF's INT8 on the OpenVINO model), reshapes it to the shapes of
the run's first input batch, marks the IR so (openvino_static.SPECIALIZED), and writes the IR.
The OpenVINO backend compiles such an IR at its shapes, and at any other shapes it is fed
reshaped (a batching job's batch sizes), as the dynamic original would run them. A model whose
inputs are static already gains nothing: the pass does not apply to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
from pydantic import BaseModel, ConfigDict

from optistudio.core.backends.openvino_backend import import_openvino
from optistudio.core.backends.openvino_static import SPECIALIZED
from optistudio.core.errors import PassFailed, first_line
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.nncf_openvino import openvino_model
from optistudio.core.passes.prepare import GraphNotApplicable


class StaticShapesConfig(BaseModel):
    """ov_static has no options: the shapes are the run's."""

    model_config = ConfigDict(extra="forbid")


def run_ov_static(
    model: Path, out: Path, config: StaticShapesConfig, context: PassContext
) -> PassReport:
    """Read or convert `model`, reshape it to the run's input shapes, write `out` as .xml."""
    ov = import_openvino()
    if model.suffix == ".xml":
        graph, warnings = ov.Core().read_model(str(model)), []
    else:
        proto = onnx.load(model, load_external_data=False)
        graph, _opset, warnings = openvino_model(ov, model, proto)
    if not graph.is_dynamic():
        raise GraphNotApplicable(
            "The model's inputs have no dynamic dim: OpenVINO compiles it at static shapes "
            "already.",
            hint="Nothing to fix; use the variant without this step.",
        )
    shapes = run_shapes(context, [port.get_any_name() for port in graph.inputs])
    context.progress(0.2, "reshaping to the run's input shapes")
    try:
        graph.reshape(shapes)
    except Exception as exc:  # OpenVINO raises its own untyped errors
        raise GraphNotApplicable(
            f"OpenVINO could not reshape the model to {_shown(shapes)}: {first_line(exc)}",
            hint="Use the variant without this step: it runs with dynamic dims.",
        ) from exc
    graph.set_rt_info(_shown(shapes), SPECIALIZED)
    target = out.with_suffix(".xml")
    target.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(graph, str(target), compress_to_fp16=False)
    context.progress(1.0, "fixed at the run's shapes")
    details = {"format": "OpenVINO IR (.xml + .bin)", "static_shapes": shapes}
    return PassReport(output=target, details=details, warnings=warnings)


def run_shapes(context: PassContext, names: list[str]) -> dict[str, list[int]]:
    """The shapes of the run's first input batch for the graph's inputs `names`."""
    source = context.calibration
    first: dict[str, Any] | None = next(iter(source.batches()), None) if source else None
    if first is None:
        raise PassFailed(
            "Fixing the model at its run's input shapes needs the run's inputs.",
            hint="Run it within an optimization run, which feeds the model its inputs.",
        )
    missing = [name for name in names if name not in first]
    if missing:
        raise GraphNotApplicable(
            f"The run's inputs do not name the model's input(s) {', '.join(missing)}.",
            hint="Use the variant without this step.",
        )
    return {name: [int(d) for d in first[name].shape] for name in names}


def _shown(shapes: dict[str, list[int]]) -> str:
    return ", ".join(f"{name}={'x'.join(map(str, dims))}" for name, dims in shapes.items())


OV_STATIC = PassInfo(
    name="ov_static",
    label="Static shapes (OpenVINO IR)",
    description=(
        "The model as an OpenVINO IR fixed at the run's input shapes: OpenVINO's CPU plugin "
        "runs a graph whose dims are all known faster than the same graph with dynamic dims. "
        "At other shapes the IR is compiled again, reshaped. Runs on OpenVINO only; a model "
        "with static inputs gains nothing."
    ),
    config="optistudio.core.passes.ov_static:StaticShapesConfig",
    implementation="optistudio.core.passes.ov_static:run_ov_static",
    produces_precision="fp32",
)
