"""Per-operator profiles from the runtimes' own profilers, and their comparison by op type.

ONNX Runtime writes a Chrome-trace JSON when `SessionOptions.enable_profiling` is set: one
"Node" event per kernel call (name '<node>_kernel_time', args.op_name, args.input_type_shape)
inside one "Session" event 'model_run' per inference. OpenVINO keeps per-layer counters when
compiled with PERF_COUNT (`ov::enable_profiling`); `request.get_profiling_info()` returns the
last inference's layers (node_name, node_type, exec_type such as 'brgconv_avx512_I8', status,
real_time). Both describe the *optimized* graph the runtime executes: fused nodes carry one of
their original names, and the runtime adds nodes of its own (ORT 'ReorderOutput', OpenVINO
'Reorder'). A node's precision is read from what it ran on: ORT's input element types, the
suffix of OpenVINO's exec_type.

Times are per inference: a node's time in each profiled run (warm-up runs excluded; 0 in a run
where it did not execute), averaged after dropping the slowest 10 % of runs when there are at
least 10, so one preempted run on a busy machine does not make a Flatten the bottleneck. A node's share is its time over the sum of all nodes' times, which is less than
the wall time of a run (the runtime's own scheduling is not in any node). ONNX Runtime's profile
parsing and the mapping of runtime names back to the file's nodes live in
optistudio.core.measure.node_times (the INT8 placement pass reads them too).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends.openvino_backend import (
    compile_config,
    layer_precisions,
    read_model,
    runtime_message,
)
from optistudio.core.backends.target import RunsOnTarget, Threads
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec, ModelLoadError
from optistudio.core.machine.environment import fingerprint
from optistudio.core.measure.node_times import ORT_TYPES as ORT_TYPES
from optistudio.core.measure.node_times import QDQ_OPS as QDQ_OPS
from optistudio.core.measure.node_times import (
    GraphNames,
    OrtProfiler,
    RawNodeTime,
)
from optistudio.core.measure.node_times import op_family as op_family
from optistudio.core.measure.node_times import parse_ort_profile as parse_ort_profile
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.core.model.intake import inspect_model

PROFILED_BACKENDS = ("onnxruntime", "openvino")
OV_PRECISIONS = {
    "f32": "fp32",
    "f16": "fp16",
    "bf16": "bf16",
    "i8": "int8",
    "u8": "int8",
    "i32": "int32",
    "i64": "int64",
}
LAYOUT_OPS = frozenset({"Transpose", "ReorderInput", "ReorderOutput", "Reorder"})
COMPUTE_FAMILIES = frozenset({"Conv", "ConvTranspose", "MatMul", "Gemm", "Attention"})


class NodeTime(BaseModel):
    """One node of the executed graph."""

    model_config = ConfigDict(extra="forbid")

    node: str = Field(description="Name the runtime gave the node.")
    graph_node: str = Field(description="Matching node name in the ONNX file, '' if none.")
    op_type: str = Field(description="Op type the runtime executed (e.g. QLinearConv).")
    family: str = Field(description="Op type folded across precisions (see op_family).")
    precision: str = Field(description="Precision it really ran in (fp32, int8, ...); '' unknown.")
    kernel: str = Field(default="", description="Runtime kernel (OpenVINO exec_type), if known.")
    time_us: float = Field(description="Mean time per inference, microseconds.")
    share: float = Field(description="time_us over the sum of all nodes' time_us.")
    calls: int = Field(description="Kernel calls counted over the profiled runs.")


class OpTypeTime(BaseModel):
    model_config = ConfigDict(extra="forbid")

    op_type: str
    time_us: float
    share: float
    nodes: int
    precisions: dict[str, int] = Field(description="Precision -> nodes of this op type in it.")


class OperatorProfile(BaseModel):
    """A model's per-node profile on one backend, with the plain (unprofiled) timing beside it."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="File name of the profiled model.")
    sha256: str
    inputs: list[str] = Field(description="Input signatures, 'name:dtype:[?,3,224,224]'.")
    outputs: list[str] = Field(description="Output signatures, same form.")
    backend: str
    batch_size: int
    input_shapes: dict[str, list[int]] = Field(
        default_factory=dict, description="The shape each input was fed at, by name."
    )
    runs: int
    quantized: bool = Field(description="The graph holds quantize/dequantize or integer ops.")
    node_total_us: float = Field(description="Sum of all nodes' time per inference.")
    profiled_ms: float = Field(description="Median wall time of a profiled inference.")
    plain_ms: float = Field(description="Median wall time of an unprofiled inference.")
    overhead: float = Field(description="profiled_ms / plain_ms, interleaved in the same run.")
    nodes: list[NodeTime] = Field(description="Slowest first.")
    op_types: list[OpTypeTime] = Field(description="Slowest first.")
    runtime_details: dict[str, Any] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    warnings: list[str] = Field(default_factory=list)


class OperatorProfileSpec(ModelInputs, RunsOnTarget):
    """How to profile: backend, batch, inputs and how many runs."""

    model_config = ConfigDict(extra="forbid")
    # Two sessions share the process: idle threads must not spin and steal the other's cores.
    pinned_target: ClassVar[Mapping[str, Any]] = {"spin_wait": False}

    backend: Literal["onnxruntime", "openvino"] = Field(
        default="onnxruntime", description="Runtime whose profiler is used."
    )
    batch_size: int = Field(
        default=1, ge=1, le=4096, description="Batch size of the runs (of inputs without a shape)."
    )
    threads: Threads = None
    warmup_runs: int = Field(default=5, ge=0, le=1000, description="Runs not counted.")
    runs: int = Field(
        default=30, ge=1, le=100_000, description="Profiled runs (and as many plain)."
    )
    seed: int = Field(default=0, description="Seed of the synthetic inputs.")


def measure_operator_profile(
    path: Path, spec: OperatorProfileSpec, *, work_dir: Path, info: ModelInfo | None = None
) -> OperatorProfile:
    """Profile `path` with its runtime's profiler; plain runs interleave for the overhead.

    Raises ModelRejected / ModelLoadError (with the runtime's reason) for a model that does not
    load, InvalidSpec for inputs that cannot be made.
    """
    info = info or inspect_model(path)
    feeds, batch_size, warnings = operator_profile_inputs(info, spec)
    options = spec.run_target.session_options()
    plain = get_backend(spec.backend).load(path, options)
    try:
        profiler = _PROFILERS[spec.backend](path, options, work_dir)
        try:
            plain_ms, profiled_ms = _interleaved(plain.run, profiler.run, feeds, spec)
            raw = profiler.finish(spec.warmup_runs)
        finally:
            profiler.close()
    finally:
        plain.close()
    nodes = _with_graph_names(_shares(raw), GraphNames(path))
    return OperatorProfile(
        model=path.name,
        sha256=info.sha256,
        inputs=[signature(t) for t in info.inputs],
        outputs=[signature(t) for t in info.outputs],
        backend=spec.backend,
        batch_size=batch_size,
        input_shapes={name: list(array.shape) for name, array in feeds.items()},
        runs=spec.runs,
        quantized=is_quantized(info.op_histogram),
        node_total_us=sum(n.time_us for n in nodes),
        profiled_ms=profiled_ms,
        plain_ms=plain_ms,
        overhead=profiled_ms / plain_ms if plain_ms > 0 else 1.0,
        nodes=nodes,
        op_types=by_op_type(nodes),
        runtime_details=plain.details,
        environment=fingerprint(threads=spec.threads),
        warnings=warnings,
    )


def operator_profile_inputs(
    info: ModelInfo, spec: OperatorProfileSpec
) -> tuple[dict[str, np.ndarray], int, list[str]]:
    """The inputs a profile runs on (the spec's arrays, shapes and values, the rest synthetic),
    their batch size (the spec's, or the one full shapes imply) and warnings about dims."""
    return spec.user_feeds(info.inputs, batch_size=spec.batch_size, seed=spec.seed)


def signature(tensor: TensorSpec) -> str:
    """'name:dtype:[?,3,224,224]': what a variant keeps (dynamic dims may be renamed, so '?')."""
    dims = ",".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in tensor.shape)
    return f"{tensor.name}:{tensor.dtype}:[{dims}]"


def is_quantized(op_histogram: dict[str, int]) -> bool:
    """True when a graph holds Q/DQ or integer ops (a quantized variant)."""
    return any(
        op in QDQ_OPS or op.startswith("QLinear") or op.endswith("Integer") for op in op_histogram
    )


def _interleaved(
    plain: Any, profiled: Any, feeds: dict[str, np.ndarray], spec: OperatorProfileSpec
) -> tuple[float, float]:
    """Warm-up, then plain and profiled runs alternately; median wall ms of each."""
    for _ in range(spec.warmup_runs):
        plain(feeds)
        profiled(feeds)
    times: dict[str, list[float]] = {"plain": [], "profiled": []}
    for index in range(2 * spec.runs):
        key, run = ("plain", plain) if index % 2 == 0 else ("profiled", profiled)
        start = time.perf_counter()
        run(feeds)
        times[key].append((time.perf_counter() - start) * 1e3)
    return float(np.median(times["plain"])), float(np.median(times["profiled"]))


class _OpenVinoProfiler:
    """A model compiled with PERF_COUNT; counters are read after every inference."""

    def __init__(self, path: Path, options: SessionOptions, work_dir: Path) -> None:
        import openvino as ov

        core = ov.Core()
        config = compile_config(options) | {"PERF_COUNT": True}
        try:
            self._compiled = core.compile_model(read_model(ov, core, path), "CPU", config)
        except Exception as exc:  # the runtime raises its own untyped errors
            raise ModelLoadError(
                f"OpenVINO could not load this model: {runtime_message(exc)}"
            ) from exc
        self._request = self._compiled.create_infer_request()
        self._runs: list[list[Any]] = []
        self.layer_precisions = layer_precisions(self._compiled)

    def run(self, feeds: dict[str, np.ndarray]) -> None:
        self._request.infer(feeds)
        self._runs.append(self._request.get_profiling_info())

    def finish(self, warmup: int) -> list[RawNodeTime]:
        return parse_openvino_counters(self._runs[warmup:])

    def close(self) -> None:
        self._request = None
        self._compiled = None


def parse_openvino_counters(runs: list[list[Any]]) -> list[RawNodeTime]:
    """OpenVINO ProfilingInfo lists (one per inference), summed per executed layer."""
    if not runs:
        raise InvalidSpec("OpenVINO returned no performance counters after the warm-up runs.")
    sums: dict[str, RawNodeTime] = {}
    for run, layers in enumerate(runs):
        for layer in layers:
            if str(layer.status).rsplit(".", 1)[-1] != "EXECUTED":
                continue
            kernel = str(layer.exec_type)
            entry = sums.setdefault(
                layer.node_name,
                RawNodeTime(
                    node=layer.node_name,
                    op_type=str(layer.node_type),
                    precision=OV_PRECISIONS.get(kernel.rsplit("_", 1)[-1].lower(), ""),
                    kernel=kernel,
                    per_run_us=[0.0] * len(runs),
                ),
            )
            entry.add(run, layer.real_time.total_seconds() * 1e6)
    return list(sums.values())


_PROFILERS: dict[str, Any] = {"onnxruntime": OrtProfiler, "openvino": _OpenVinoProfiler}


def _shares(raw: list[RawNodeTime]) -> list[NodeTime]:
    total = sum(node.time_us for node in raw) or 1.0
    nodes = [
        NodeTime(
            node=node.node,
            graph_node="",
            op_type=node.op_type,
            family=op_family(node.op_type),
            precision=node.precision,
            kernel=node.kernel,
            time_us=node.time_us,
            share=node.time_us / total,
            calls=node.calls,
        )
        for node in raw
    ]
    return sorted(nodes, key=lambda n: -n.time_us)


def _with_graph_names(nodes: list[NodeTime], names: GraphNames) -> list[NodeTime]:
    for node in nodes:
        node.graph_node = names.match(node.node, node.family)
    return nodes


def by_op_type(nodes: list[NodeTime]) -> list[OpTypeTime]:
    """Node times summed per executed op type, slowest first."""
    total = sum(n.time_us for n in nodes) or 1.0
    grouped: dict[str, list[NodeTime]] = defaultdict(list)
    for node in nodes:
        grouped[node.op_type].append(node)
    rows = [
        OpTypeTime(
            op_type=op,
            time_us=sum(n.time_us for n in members),
            share=sum(n.time_us for n in members) / total,
            nodes=len(members),
            precisions=_count(n.precision or "unknown" for n in members),
        )
        for op, members in grouped.items()
    ]
    return sorted(rows, key=lambda r: -r.time_us)


def _count(values: Any) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for value in values:
        counts[value] += 1
    return dict(counts)
