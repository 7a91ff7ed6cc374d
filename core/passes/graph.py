"""Graph-level passes: ONNX Runtime's offline graph optimization and onnxslim simplification.

ONNX Runtime's optimizer (from level 'extended') writes its own operators: fused nodes in
com.microsoft and a few in the default domain (SimplifiedLayerNormalization, LayerNormalization
below opset 17) that onnx.checker refuses. The graph is ONNX Runtime's, so the pass checks it
the way ONNX Runtime will meet it: by loading it there. A graph that does not load back is the
pass's failure, never the model's.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Literal

import onnx
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends.reference import reference_session
from optistudio.core.errors import PassFailed, first_line
from optistudio.core.model.intake import IR_WEIGHTS_NEED_NOT_BE_INPUTS
from optistudio.core.model.undefined_ops import undefined_ops
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.prepare import uses_external
from optistudio.core.passes.prepared_cache import SIMPLIFIED, Prepared


class OrtOptimizeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    level: Literal["basic", "extended", "all"] = Field(
        default="extended",
        description="basic: constant folding and redundant-node removal (portable ONNX); "
        "extended: adds ONNX Runtime's fusions (com.microsoft ops, ONNX Runtime only); "
        "all: adds layout changes for this machine's CPU (not portable to other hardware).",
    )


class SimplifyConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    skip_fusion: bool = Field(
        default=False, description="Only fold constants and remove dead nodes; fuse nothing."
    )


def run_ort_optimize(
    model: Path, out: Path, config: OrtOptimizeConfig, context: PassContext
) -> PassReport:
    """Let ONNX Runtime optimize the graph offline and save what it would run."""
    context.progress(0.1, f"ONNX Runtime graph optimization ({config.level})")
    try:
        reference_session(model, optimization=config.level, quiet=True, optimized_model=out)
    except Exception as exc:  # the runtime raises its own untyped errors
        reason = first_line(exc).replace(str(model.parent) + "/", "")  # no server path
        raise PassFailed(f"ONNX Runtime could not optimize this model: {reason}") from exc
    context.progress(0.8, "loading the optimized graph back in ONNX Runtime")
    _check_loads(out, config.level)
    own_ops = runtime_ops(out)
    details = _node_delta(model, out) | {"level": config.level, "runtime_ops": own_ops}
    warnings = [
        f"The optimized graph uses ONNX Runtime's own operators ({', '.join(own_ops)}): "
        "it runs on ONNX Runtime only."
    ]
    return PassReport(output=out, details=details, warnings=warnings if own_ops else [])


def runtime_ops(model: Path) -> list[str]:
    """ONNX Runtime's own operators in the graph: com.microsoft ones (as 'domain.op') and those
    it writes into ONNX's domains, which ONNX does not define."""
    proto = onnx.load(model, load_external_data=False)
    contrib = {
        f"{node.domain}.{node.op_type}"
        for node in proto.graph.node
        if node.domain.startswith("com.microsoft")
    }
    return sorted(contrib) + undefined_ops(proto)


def _check_loads(out: Path, level: str) -> None:
    """The optimized graph loads in ONNX Runtime, or PassFailed saying it is the pass's fault."""
    try:
        reference_session(out, quiet=True)
    except Exception as exc:  # the runtime raises its own untyped errors
        raise PassFailed(
            f"ONNX Runtime could not load back the graph it optimized at level '{level}': "
            f"{first_line(exc)}",
            hint="The pass, not your model, is at fault: use level 'basic' (standard ONNX), "
            "or the other variants.",
        ) from exc


def run_simplify(
    model: Path, out: Path, config: SimplifyConfig, context: PassContext
) -> PassReport:
    """Constant folding, dead-node removal and onnxslim's generic fusions; a file simplified
    alike before in this process is copied, not simplified again (`SIMPLIFIED`)."""
    context.progress(0.1, "Simplifying the graph (onnxslim)")
    made = SIMPLIFIED.prepared(
        model,
        out.parent,
        ("simplify", config.skip_fusion),
        lambda: _simplified(model, out, config),
        external=uses_external(model),
    )
    if made.path not in (model, out):  # a kept copy, under the name it was first made with
        made.path.replace(out)
        made = made._replace(path=out)
    return PassReport(output=made.path, details=made.details or {}, warnings=made.notes)


def _simplified(model: Path, out: Path, config: SimplifyConfig) -> Prepared:
    import onnxslim

    options = {"skip_fusion_patterns": "all"} if config.skip_fusion else {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            slimmed = onnxslim.slim(str(model), **options)
    except Exception as exc:  # onnxslim raises untyped errors
        raise PassFailed(f"onnxslim could not simplify this model: {exc}") from exc
    original = onnx.load(model, load_external_data=False)
    if _io_types(slimmed) != _io_types(original):
        warning = (
            "onnxslim changed the types of the model's inputs or outputs (it does not keep "
            "sequences and maps, e.g. scikit-learn's ZipMap), so the graph was kept as it was."
        )
        return Prepared(model, [warning], _node_delta(model, model))
    _keep_ir_rule(slimmed)
    onnx.save(slimmed, out)
    return Prepared(out, [], _node_delta(model, out))


def _io_types(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """Each graph input (weights listed as inputs left out) and output's name and type
    (tensor element types, sequences, maps)."""
    weights = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in weights]
    return [(v.name, _type_text(v.type)) for v in (*inputs, *model.graph.output)]


def _type_text(value: onnx.TypeProto) -> str:
    kind = value.WhichOneof("value")
    if kind == "tensor_type":
        return f"tensor({value.tensor_type.elem_type})"
    if kind == "sequence_type":
        return f"sequence({_type_text(value.sequence_type.elem_type)})"
    if kind == "map_type":
        return f"map({value.map_type.key_type}, {_type_text(value.map_type.value_type)})"
    if kind == "optional_type":
        return f"optional({_type_text(value.optional_type.elem_type)})"
    return str(kind)


def _keep_ir_rule(model: onnx.ModelProto) -> None:
    """onnxslim drops initializers from the graph inputs, which IR 3 requires of them (an old
    exporter's file); raise such a model to IR 4, where weights need not be inputs, so the
    checker and onnx's version converter (used by the INT8 passes) accept it."""
    listed = {value.name for value in model.graph.input}
    unlisted = any(t.name not in listed for t in model.graph.initializer)
    if model.ir_version < IR_WEIGHTS_NEED_NOT_BE_INPUTS and unlisted:
        model.ir_version = IR_WEIGHTS_NEED_NOT_BE_INPUTS


def _node_delta(before: Path, after: Path) -> dict[str, int]:
    nodes_before = len(onnx.load(before, load_external_data=False).graph.node)
    nodes_after = len(onnx.load(after, load_external_data=False).graph.node)
    return {"nodes_before": nodes_before, "nodes_after": nodes_after}


ORT_OPTIMIZE = PassInfo(
    name="ort_optimize",
    label="ONNX Runtime graph optimization",
    description="Runs ONNX Runtime's own graph optimizer offline (constant folding, node "
    "elimination, and at 'extended' its operator fusions) and saves the optimized graph, so the "
    "work is done once instead of at every session start.",
    config="optistudio.core.passes.graph:OrtOptimizeConfig",
    implementation="optistudio.core.passes.graph:run_ort_optimize",
)

SIMPLIFY = PassInfo(
    name="simplify",
    label="Simplify (onnxslim)",
    description="Folds constants, removes dead and redundant nodes and applies onnxslim's "
    "generic pattern fusions; the result is standard ONNX for every backend.",
    config="optistudio.core.passes.graph:SimplifyConfig",
    implementation="optistudio.core.passes.graph:run_simplify",
)
