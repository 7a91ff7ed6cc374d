"""Per-layer quantization error: a float model and its quantized variant compared tensor by tensor.

Both models run on the same batches with the float graph's node outputs exposed as extra
outputs. For one tensor, with x its float values and x_q the quantized model's, summed over every
element of every sample seen:

    SQNR_dB = 10 log10( sum x^2 / sum (x - x_q)^2 )          (higher is better)
    cosine  = sum x x_q / sqrt( sum x^2 * sum x_q^2 )        (1 = same direction)
    NSR     = sum (x - x_q)^2 / sum x^2 = 10^(-SQNR_dB / 10) (noise-to-signal ratio)

Only running sums are kept, so memory is one batch of the exposed tensors. SQNR is clipped to
[-MAX_SQNR_DB, MAX_SQNR_DB] (identical tensors read MAX_SQNR_DB); NaN or Inf in the quantized
tensor reads -MAX_SQNR_DB and cosine 0.

Errors accumulate downstream: every tensor after a badly quantized layer is bad too, so a raw
SQNR ranking points at the end of the graph. Layers are therefore ranked by the noise they *add*,
NSR(output) - NSR(upstream), where upstream is the worst NSR among the compared tensors feeding
the node (looking through nodes whose outputs were not compared, such as a Conv whose Relu the
quantizer folded away). This assumes relative noise passes through a layer roughly unchanged,
which is a heuristic: nonlinearities and normalisations can amplify or damp it. The ranking says
where to look first, not what each layer costs on its own.

Tensor names in QDQ models (checked with ONNX Runtime 1.32): the quantizer keeps the original
name on the tensor a quantized op produces, which then feeds QuantizeLinear -> DequantizeLinear
('m' -> 'm_QuantizeLinear_Output' -> 'm_DequantizeLinear_Output'); a graph output keeps its name
by moving it to the final DequantizeLinear's output. The value to compare is the dequantized one,
what the next layers see: the pre-QuantizeLinear tensor can differ from the float one by more than
rounding, because the quantizer folds a Relu (or Clip) into the activation range and drops the
node, so 'r' = Relu(conv) becomes the Conv's raw output and only the QuantizeLinear clips it. So
each float tensor is matched by name and, where that name feeds a Q -> DQ pair, compared with the
DQ's output; a float tensor the quantized graph lacks (the Conv output before a folded Relu) is
skipped. `quantized_node` walks back through Q/DQ to the node that computed the value.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np
import onnx
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends.reference import reference_session
from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import DataMismatch, ModelLoadError

if TYPE_CHECKING:
    import onnxruntime as ort

logger = logging.getLogger(__name__)

MAX_SQNR_DB = 200.0
_FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE)
_DQ = "DequantizeLinear"
_QDQ_OPS = ("QuantizeLinear", _DQ)
_EXTERNAL_DATA_BYTES = 2**31 - 2**27


class LayerError(BaseModel):
    """How far one tensor of the quantized model is from the float model's."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(description="Name of the float-graph node producing the tensor.")
    op_type: str = Field(description="Op type of that node.")
    tensor: str = Field(
        description="Float-graph name of the tensor; in the quantized graph its value after "
        "QuantizeLinear -> DequantizeLinear is compared."
    )
    quantized_node: str = Field(
        description="Node computing the value in the quantized graph (Q/DQ skipped); differs "
        "from `node` where the quantizer folded an activation (Relu, Clip) into its producer. "
        "The name to put in nodes_to_exclude."
    )
    sqnr_db: float = Field(description="Signal-to-quantization-noise ratio in dB (higher=better).")
    cosine: float = Field(description="Cosine of the float and quantized values, all elements.")
    noise_to_signal: float = Field(description="sum (x - x_q)^2 / sum x^2.")
    noise_added: float = Field(
        description="noise_to_signal minus the worst of the compared tensors feeding the node: "
        "the relative noise this layer adds (the ranking key)."
    )
    samples: int = Field(description="Samples (rows along the first axis) compared.")


def layer_errors(
    float_model: Path,
    quantized_model: Path,
    data: CalibrationSource,
    *,
    max_batches: int = 8,
    work_dir: Path,
    order: Literal["added", "sqnr"] = "added",
) -> list[LayerError]:
    """Per-tensor error of `quantized_model` against `float_model`, worst first.

    `order="added"` ranks by the noise each layer adds (see the module docstring), "sqnr" by
    the tensor's own SQNR. Temporary copies of both models go to `work_dir` and are removed.
    Raises DataMismatch when a batch does not fit or `data` yields none.
    """
    float_proto = onnx.shape_inference.infer_shapes(
        onnx.load(float_model, load_external_data=False)
    )
    quant_graph = onnx.load(quantized_model, load_external_data=False).graph
    pairs = _comparable(float_proto.graph, quant_graph)
    if not pairs:
        return []
    work_dir.mkdir(parents=True, exist_ok=True)
    copies = [work_dir / "sensitivity_float.onnx", work_dir / "sensitivity_quantized.onnx"]
    names = ([pair.tensor for pair in pairs], [pair.quantized for pair in pairs])
    elem_types = _elem_types(float_proto.graph)
    types = [elem_types[pair.tensor] for pair in pairs]
    try:
        for source, copy, outputs in zip(
            (float_model, quantized_model), copies, names, strict=True
        ):
            _save_with_outputs(Path(source), outputs, types, copy)
        streamed = _stream(copies, data, names, max_batches)
    finally:
        for copy in copies:
            _remove_model(copy)
    errors = _layer_errors(float_proto.graph, quant_graph, pairs, streamed)
    return sorted(errors, key=_sort_key(order))


def _sort_key(order: str) -> Callable[[LayerError], tuple[float, float]]:
    if order == "sqnr":
        return lambda error: (error.sqnr_db, -error.noise_added)
    return lambda error: (-error.noise_added, error.sqnr_db)


@dataclass(frozen=True)
class _Pair:
    """One float-graph tensor, its producer, and the quantized graph's tensor holding its value."""

    tensor: str
    node: str
    quantized: str


def _comparable(float_graph: onnx.GraphProto, quant_graph: onnx.GraphProto) -> list[_Pair]:
    """Float-typed outputs of float-graph nodes that the quantized graph also produces."""
    types = _elem_types(float_graph)
    produced = {name for node in quant_graph.node for name in node.output}
    restored = _dequantized_names(quant_graph)
    return [
        _Pair(name, node.name, restored.get(name, name))
        for node in float_graph.node
        if node.op_type not in _QDQ_OPS
        for name in node.output
        if name and name in produced and types.get(name) in _FLOAT_TYPES
    ]


def _dequantized_names(graph: onnx.GraphProto) -> dict[str, str]:
    """t -> the output of the DequantizeLinear in t -> QuantizeLinear -> DequantizeLinear."""
    restores = {node.input[0]: node.output[0] for node in graph.node if node.op_type == _DQ}
    return {
        node.input[0]: restores[node.output[0]]
        for node in graph.node
        if node.op_type == "QuantizeLinear" and node.output[0] in restores
    }


def _elem_types(graph: onnx.GraphProto) -> dict[str, int]:
    infos = itertools.chain(graph.value_info, graph.input, graph.output)
    return {info.name: info.type.tensor_type.elem_type for info in infos}


def _save_with_outputs(source: Path, names: list[str], types: list[int], path: Path) -> None:
    model = onnx.load(source)
    present = {output.name for output in model.graph.output}
    for name, elem_type in zip(names, types, strict=True):
        if name not in present:
            model.graph.output.append(onnx.helper.make_tensor_value_info(name, elem_type, None))
    external = sum(len(init.raw_data) for init in model.graph.initializer) > _EXTERNAL_DATA_BYTES
    onnx.save_model(model, path, save_as_external_data=external, location=f"{path.name}.data")


def _remove_model(path: Path) -> None:
    path.unlink(missing_ok=True)
    path.with_name(f"{path.name}.data").unlink(missing_ok=True)


@dataclass
class _Sums:
    """Running sums of one tensor: signal, noise, cross and candidate energy."""

    signal: float = 0.0
    noise: float = 0.0
    cross: float = 0.0
    candidate: float = 0.0
    nonfinite: bool = False
    mismatched: bool = False

    def add(self, reference: np.ndarray, candidate: np.ndarray) -> None:
        if reference.shape != candidate.shape:
            self.mismatched = True
            return
        ref, cand = reference.astype(np.float64).ravel(), candidate.astype(np.float64).ravel()
        if not np.isfinite(cand).all():
            self.nonfinite = True
            return
        self.signal += float(ref @ ref)
        self.noise += float((ref - cand) @ (ref - cand))
        self.cross += float(ref @ cand)
        self.candidate += float(cand @ cand)

    def sqnr_db(self) -> float:
        if self.nonfinite or (self.signal == 0 and self.noise > 0):
            return -MAX_SQNR_DB
        if self.noise == 0:
            return MAX_SQNR_DB
        return float(np.clip(10 * math.log10(self.signal / self.noise), -MAX_SQNR_DB, MAX_SQNR_DB))

    def cosine(self) -> float:
        if self.nonfinite:
            return 0.0
        if self.signal == 0 or self.candidate == 0:
            return 1.0 if self.signal == self.candidate else 0.0
        return float(np.clip(self.cross / math.sqrt(self.signal * self.candidate), -1.0, 1.0))

    def noise_to_signal(self) -> float:
        return float(10 ** (-self.sqnr_db() / 10))


@dataclass
class _Streamed:
    sums: dict[str, _Sums]
    samples: int


def _stream(
    copies: list[Path],
    data: CalibrationSource,
    names: tuple[list[str], list[str]],
    max_batches: int,
) -> _Streamed:
    """Sums keyed by the float graph's tensor names."""
    sessions = [_session(copy) for copy in copies]
    sums = {name: _Sums() for name in names[0]}
    samples = batches = 0
    for batches, batch in enumerate(itertools.islice(data.batches(), max_batches), start=1):
        reference = _run(sessions[0], batch, names[0], batches)
        candidate = _run(sessions[1], batch, names[1], batches)
        for name, ref, cand in zip(names[0], reference, candidate, strict=True):
            sums[name].add(ref, cand)
        samples += _rows(batch)
    if batches == 0:
        raise DataMismatch(f"The data ({data.description}) yielded no batch.")
    return _Streamed(sums, samples)


def _rows(batch: Mapping[str, np.ndarray]) -> int:
    first = next(iter(batch.values()), None)
    return int(first.shape[0]) if first is not None and first.ndim else 1


def _session(path: Path) -> ort.InferenceSession:
    try:
        return reference_session(path)
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise ModelLoadError(
            f"ONNX Runtime could not load {path.name} to compare layers: {exc}"
        ) from exc


def _run(
    session: ort.InferenceSession, batch: Mapping[str, np.ndarray], names: list[str], number: int
) -> list[np.ndarray]:
    inputs = [arg.name for arg in session.get_inputs()]
    missing = [name for name in inputs if name not in batch]
    if missing:
        raise DataMismatch(
            f"Batch {number} lacks input(s) {', '.join(missing)}; the model expects "
            f"{', '.join(inputs)}."
        )
    try:
        outputs: list[np.ndarray] = session.run(names, {name: batch[name] for name in inputs})
    except Exception as exc:  # onnxruntime raises its own untyped errors
        raise DataMismatch(f"Batch {number} does not fit the model: {exc}") from exc
    return outputs


def _layer_errors(
    float_graph: onnx.GraphProto,
    quant_graph: onnx.GraphProto,
    pairs: list[_Pair],
    streamed: _Streamed,
) -> list[LayerError]:
    kept = [pair for pair in pairs if not streamed.sums[pair.tensor].mismatched]
    nsr = {pair.tensor: streamed.sums[pair.tensor].noise_to_signal() for pair in kept}
    upstream = _upstream_noise(float_graph, nsr)
    op_types = {name: node.op_type for node in float_graph.node for name in node.output}
    producers = _quantized_producers(quant_graph)
    return [
        LayerError(
            node=pair.node,
            op_type=op_types.get(pair.tensor, ""),
            tensor=pair.tensor,
            quantized_node=producers.get(pair.quantized, ""),
            sqnr_db=streamed.sums[pair.tensor].sqnr_db(),
            cosine=streamed.sums[pair.tensor].cosine(),
            noise_to_signal=nsr[pair.tensor],
            noise_added=nsr[pair.tensor] - upstream[pair.tensor],
            samples=streamed.samples,
        )
        for pair in kept
    ]


def _upstream_noise(graph: onnx.GraphProto, nsr: dict[str, float]) -> dict[str, float]:
    """For each compared tensor, the worst NSR among the compared tensors feeding its producer.

    One pass in graph (topological) order: a tensor not compared carries the worst NSR of its
    producer's inputs, so a chain of uncompared tensors is looked through.
    """
    carried: dict[str, float] = {}
    upstream: dict[str, float] = {}
    for node in graph.node:
        feeding = max((carried.get(name, 0.0) for name in node.input if name), default=0.0)
        for name in node.output:
            if name in nsr:
                upstream[name] = feeding
            carried[name] = nsr.get(name, feeding)
    return upstream


def _quantized_producers(graph: onnx.GraphProto) -> dict[str, str]:
    """Tensor -> the non-Q/DQ node computing it, looking back through Q/DQ chains."""
    producer = {name: node for node in graph.node for name in node.output}

    def compute(name: str) -> str:
        node = producer.get(name)
        while node is not None and node.op_type in _QDQ_OPS:
            node = producer.get(node.input[0])
        return node.name if node is not None else ""

    return {name: compute(name) for name in producer}
