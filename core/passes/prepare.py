"""Graphs made ready for ONNX Runtime's quantizer, and what it makes checked.

Exporters write graphs the quantizer chokes on: nodes with no name or the same name (an
already-QDQ file quantized again gets two `r_DequantizeLinear`, which ONNX Runtime refuses to
load), weights listed as graph inputs (IR < 4, keras2onnx: the opset converter then says "Input w
is undefined!"), a weight behind a Transpose (tf2onnx: dynamic quantization says "Expected w to
be an initializer"). Before every INT8 pass on ONNX Runtime's quantizer the graph is

1. given unique node names (empty and repeated ones renamed, the others kept, so
   `nodes_to_exclude` still names them) and its weights taken out of the graph inputs;
2. pre-processed as ONNX Runtime documents (`quant_pre_process`: symbolic shape inference,
   graph optimisation, ONNX shape inference), with external data kept external (> 2 GB);
   its outputs keep the shapes the original declares (`declared_outputs`: symbolic inference
   re-declares them, and a variant declaring other outputs reads as another model).
   Dynamic INT8 keeps MatMul + Add apart (ORT's MatMulAddFusion makes a Gemm, which dynamic
   quantization does not quantize).

A step that fails leaves the graph as it was, with a note. What the quantizer makes is then
renamed again where it repeated names, and loaded once in ONNX Runtime: a graph it still cannot
load, or a quantizer that raises on this graph, is `GraphNotApplicable` (the recipe does not
apply to this graph, with ONNX Runtime's sentence), not a failure of the run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import onnx
from onnx.external_data_helper import uses_external_data

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends.blame import load_cause
from optistudio.core.errors import ModelLoadError, OptistudioError, PassFailed
from optistudio.core.passes.declared_outputs import keep_declared_outputs
from optistudio.core.passes.prepared_cache import PREPARED, Prepared

logger = logging.getLogger(__name__)

IR_WITH_FREE_INITIALIZERS = 4
"""From IR 4 on, an initializer need not be a graph input."""
KEEP_FOR_DYNAMIC = ("MatMulAddFusion",)
"""ORT fusions dynamic INT8 must not see: it quantizes MatMul, never Gemm."""
_EXTERNAL_DATA_BYTES = 2**31 - 2**27
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


class GraphNotApplicable(PassFailed):
    """The pass does not apply to this graph: ONNX Runtime's quantizer refused it, or made a
    graph ONNX Runtime cannot load. The run lists the recipe as not applicable, not failed."""


def prepare_for_quantizer(
    model: Path,
    work_dir: Path,
    *,
    optimize: bool = True,
    keep_fusions: Sequence[str] = (),
) -> Prepared:
    """`model` with unique node names and weights out of its inputs, pre-processed by ONNX
    Runtime (graph optimisation only when `optimize`; `keep_fusions` names ORT optimizers not
    to run); each step that fails leaves the graph as it was and says so in a note. A model
    prepared alike before in this process is copied, not prepared again (`PREPARED`)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    return PREPARED.prepared(
        Path(model),
        work_dir,
        (optimize, tuple(keep_fusions)),
        lambda: _prepare(Path(model), work_dir, optimize, keep_fusions),
        external=uses_external(Path(model)),
    )


def _prepare(model: Path, work_dir: Path, optimize: bool, keep_fusions: Sequence[str]) -> Prepared:
    named, notes = _tidied(model.resolve(), work_dir.resolve())
    try:
        prepared = _preprocessed(named, work_dir.resolve(), optimize, keep_fusions)
    except Exception as exc:  # pre-processing is an aid; any failure of it is survivable
        logger.info("quantization pre-processing failed: %s", exc)
        sentence = f"{type(exc).__name__}: {exc}".strip()[:300]
        return Prepared(named, [*notes, f"Pre-processing failed ({sentence}); quantized as is."])
    keep_declared_outputs(model, prepared)
    return Prepared(prepared, notes)


def unique_node_names(graph: onnx.GraphProto) -> int:
    """Rename the nodes with no name or a name an earlier node has; returns how many."""
    taken = {node.name for node in graph.node if node.name}
    seen: set[str] = set()
    renamed = 0
    for index, node in enumerate(graph.node):
        if node.name and node.name not in seen:
            seen.add(node.name)
            continue
        base = node.name or f"{node.op_type}_{index}"
        name, suffix = base, 1
        while name in taken:
            name, suffix = f"{base}_{suffix}", suffix + 1
        node.name = name
        taken.add(name)
        seen.add(name)
        renamed += 1
    return renamed


def weights_out_of_inputs(proto: onnx.ModelProto) -> int:
    """Drop graph inputs that are initializers (IR < 4 lists every weight as an input),
    raising the IR version to 4 where needed; returns how many."""
    constants = {init.name for init in proto.graph.initializer}
    kept = [value for value in proto.graph.input if value.name not in constants]
    dropped = len(proto.graph.input) - len(kept)
    if dropped:
        del proto.graph.input[:]
        proto.graph.input.extend(kept)
    return dropped


def free_weights_ir(proto: onnx.ModelProto) -> int | None:
    """Raise an IR version below 4 to 4, where a weight need not be a graph input (ONNX
    Runtime runs such files; the opset converter says "Input w is undefined!"); returns the
    old version, None when unchanged."""
    old = proto.ir_version
    if not proto.graph.initializer or old >= IR_WITH_FREE_INITIALIZERS:
        return None
    proto.ir_version = IR_WITH_FREE_INITIALIZERS
    return old


def already_quantized(model: Path) -> list[str]:
    """Names of the nodes that already read a DequantizeLinear output (an already-QDQ file):
    quantizing them again repeats the names of their Q/DQ tensors, so they are left as they
    are. Names are the prepared graph's (unique, none empty)."""
    graph = onnx.load(model, load_external_data=False).graph
    dequantized = {out for n in graph.node if n.op_type == "DequantizeLinear" for out in n.output}
    return [
        node.name
        for node in graph.node
        if node.op_type not in QDQ_OPS and dequantized.intersection(node.input)
    ]


def finish_quantized(out: Path, action: str, *, original: Path | None = None) -> list[str]:
    """Rename the quantized graph's repeated node names in place, give its outputs the shapes
    `original` declares (`keep_declared_outputs`), then load it once in ONNX Runtime;
    GraphNotApplicable with its sentence when it cannot. Returns notes."""
    if original is not None:
        keep_declared_outputs(original, out)
    proto = onnx.load(out, load_external_data=False)
    renamed = unique_node_names(proto.graph)
    if renamed:
        onnx.save_model(proto, out)  # external data, if any, stays where it is named
    try:
        get_backend("onnxruntime").load(out, SessionOptions()).close()
    except ModelLoadError as exc:
        raise GraphNotApplicable(
            f"Not applicable to this graph: {action} made a model ONNX Runtime cannot load: "
            f"{load_cause(exc.message)}",
            hint="The other recipes still apply; report this with the model if it should.",
        ) from exc
    return [f"Renamed {renamed} repeated node name(s) in the quantized model."] if renamed else []


@contextmanager
def quantizer_errors(action: str) -> Iterator[None]:
    """ONNX Runtime's quantizer raising on a graph (untyped exceptions) as GraphNotApplicable
    with its sentence; our own errors pass through."""
    try:
        yield
    except OptistudioError:
        raise
    except Exception as exc:
        raise GraphNotApplicable(
            f"Not applicable to this graph: ONNX Runtime could not {action}: "
            f"{type(exc).__name__}: {exc}",
            hint="Exclude the failing nodes (nodes_to_exclude) or op types, or use the other "
            "recipes.",
        ) from exc


def uses_external(model: Path) -> bool:
    """Whether the file keeps any weight in external data."""
    graph = onnx.load(model, load_external_data=False).graph
    return any(uses_external_data(init) for init in graph.initializer)


def _tidied(model: Path, work_dir: Path) -> tuple[Path, list[str]]:
    """The model, or a copy with unique node names and weights out of its inputs."""
    proto = onnx.load(model, load_external_data=False)
    renamed = unique_node_names(proto.graph)
    old_ir = free_weights_ir(proto)
    dropped = weights_out_of_inputs(proto)
    if not (renamed or dropped or old_ir):
        return model, []
    onnx.load_external_data_for_model(proto, str(model.parent))
    target = work_dir / "named.onnx"
    _save(proto, target, external=uses_external(model))
    notes = [f"Named {renamed} unnamed or repeated node(s) for the quantizer."] if renamed else []
    if old_ir:
        notes.append(f"Raised the IR version {old_ir} to {IR_WITH_FREE_INITIALIZERS}.")
    if dropped:
        notes.append(f"Took {dropped} weight(s) out of the graph inputs for the quantizer.")
    return target, notes


def _preprocessed(model: Path, work_dir: Path, optimize: bool, keep: Sequence[str]) -> Path:
    """ONNX Runtime's quant_pre_process, in `work_dir` (it leaves temporary files where it runs
    when it fails); with `keep`, the graph optimisation is ours with those fusions left out."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    target = work_dir / "preprocessed.onnx"
    source, own = model, bool(optimize and keep)
    if own:
        source = _optimized(model, work_dir / "optimized.onnx", keep)
    external = uses_external(source) or _bytes(source) > _EXTERNAL_DATA_BYTES
    before = set(work_dir.iterdir())
    try:
        with contextlib.chdir(work_dir):
            quant_pre_process(
                source,
                target,
                skip_optimization=own or not optimize,
                save_as_external_data=external,
                all_tensors_to_one_file=True,
                external_data_location=f"{target.name}.data",
            )
    except Exception:
        for leftover in set(work_dir.iterdir()) - before:
            if leftover.is_file():
                leftover.unlink()
        raise
    return target


def _optimized(model: Path, target: Path, keep: Sequence[str]) -> Path:
    """ONNX Runtime's basic graph optimisation (constant folding, redundant nodes), as
    quant_pre_process runs it, without the optimizers named in `keep`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    options.optimized_model_filepath = str(target)
    if uses_external(model):
        data = f"{target.name}.data"
        options.add_session_config_entry(
            "session.optimized_model_external_initializers_file_name", data
        )
    session = ort.InferenceSession(
        str(model), options, providers=["CPUExecutionProvider"], disabled_optimizers=list(keep)
    )
    del session
    return target


def _bytes(model: Path) -> int:
    return model.stat().st_size


def _save(proto: onnx.ModelProto, path: Path, *, external: bool) -> None:
    weights = sum(len(init.raw_data) for init in proto.graph.initializer)
    big = external or weights > _EXTERNAL_DATA_BYTES
    onnx.save_model(proto, path, save_as_external_data=big, location=f"{path.name}.data")
