"""Per-node times from ONNX Runtime's profiler, and the names that map them back to the file.

ONNX Runtime writes a Chrome-trace JSON when `SessionOptions.enable_profiling` is set: one
"Node" event per kernel call (name '<node>_kernel_time', args.op_name, args.input_type_shape)
inside one "Session" event 'model_run' per inference. The events name the nodes of the
*optimized* graph the runtime executes: a fused node carries one of its original names
('conv1_token_9', or its output's name 'r1_nchwc'), and the runtime adds nodes of its own
('ReorderOutput', a layout 'Transpose'). `GraphNames.match` maps such a name back to a node of
the file.

A node's time in one run is the sum of its kernel calls in that run (0 where it did not run).
Over the runs it is either the trimmed mean (the slowest 10 % of runs dropped when there are at
least 10, so one preempted run on a busy machine does not make a Flatten the bottleneck) or the
median.

The operator profile (optistudio.core.diagnose.operator_profile) and the INT8 placement pass
(optistudio.core.passes.int8_placed) both read these times; they live here, below both.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from pydantic import BaseModel, Field

from optistudio.core.backends import SessionOptions
from optistudio.core.backends.reference import reference_session
from optistudio.core.errors import InvalidSpec, ModelLoadError, first_line

ORT_TYPES = {
    "float": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "double": "fp64",
    "uint8": "int8",
    "int8": "int8",
    "int32": "int32",
    "int64": "int64",
    "bool": "bool",
}
QDQ_OPS = frozenset(
    {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "FakeQuantize", "Convert"}
)
_FAMILY = {
    "ConvInteger": "Conv",
    "FusedConv": "Conv",
    "NhwcConv": "Conv",
    "Convolution": "Conv",
    "GroupConvolution": "Conv",
    "ConvolutionBackpropData": "ConvTranspose",
    "MatMulInteger": "MatMul",
    "MatMulIntegerToFloat": "MatMul",
    "DynamicQuantizeMatMul": "MatMul",
    "FusedMatMul": "MatMul",
    "FullyConnected": "MatMul",
    "QGemm": "Gemm",
    "ReorderInput": "Reorder",
    "ReorderOutput": "Reorder",
}
_TOKEN = re.compile(r"(_token_\d+|_nchwc)+$")


def op_family(op_type: str) -> str:
    """Op type with its quantized / fused / runtime-specific spelling folded ('QLinearConv'->'Conv').

    Quantize/dequantize ops all fold into 'Quantize/Dequantize', so FP32 and INT8 profiles line
    up by what the layer computes.
    """
    if op_type in QDQ_OPS:
        return "Quantize/Dequantize"
    if op_type in _FAMILY:
        return _FAMILY[op_type]
    return op_type.removeprefix("QLinear") or op_type


class RawNodeTime(BaseModel):
    """One executed node's time in each profiled run."""

    node: str
    op_type: str
    precision: str
    kernel: str = ""
    per_run_us: list[float] = Field(description="Time in each profiled run.")
    calls: int = 0

    def add(self, run: int, duration_us: float) -> None:
        self.per_run_us[run] += duration_us
        self.calls += 1

    @property
    def time_us(self) -> float:
        """Mean per run without the slowest 10 % of runs (when there are 10 or more)."""
        ordered = sorted(self.per_run_us)
        keep = len(ordered) - len(ordered) // 10
        return float(np.mean(ordered[:keep])) if ordered else 0.0

    @property
    def median_us(self) -> float:
        """Median time per run."""
        return float(np.median(self.per_run_us)) if self.per_run_us else 0.0


class OrtProfiler:
    """An ONNX Runtime session (all graph optimisations) with profiling on; its JSON is parsed
    when finished. `optimized_model`, if given, receives the graph the runtime executes."""

    def __init__(
        self,
        path: Path,
        options: SessionOptions,
        work_dir: Path,
        optimized_model: Path | None = None,
    ) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._session = reference_session(
                path,
                optimization="all",
                threads=options.threads,
                spin_wait=options.spin_wait,
                quiet=True,
                profile_prefix=work_dir / "ort_profile",
                optimized_model=optimized_model,
            )
        except Exception as exc:  # the runtime raises its own untyped errors
            raise ModelLoadError(
                f"ONNX Runtime could not load this model: {first_line(exc)}"
            ) from exc
        self._file: Path | None = None

    def run(self, feeds: dict[str, np.ndarray]) -> None:
        self._session.run(None, feeds)

    def finish(self, warmup: int) -> list[RawNodeTime]:
        self._file = Path(self._session.end_profiling())
        return parse_ort_profile(json.loads(self._file.read_text()), skip_runs=warmup)

    def close(self) -> None:
        if self._file is not None:
            self._file.unlink(missing_ok=True)
        self._session = None


def parse_ort_profile(events: list[dict[str, Any]], *, skip_runs: int = 0) -> list[RawNodeTime]:
    """Node events of an ORT profile, summed per node, runs after the first `skip_runs`."""
    runs = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "Session" and e.get("name") == "model_run"
    )[skip_runs:]
    if not runs:
        raise InvalidSpec("The ONNX Runtime profile holds no inference after the warm-up runs.")
    starts = np.array([start for start, _ in runs])
    sums: dict[str, RawNodeTime] = {}
    for event in events:
        run = _run_of(event["ts"], starts, runs) if event.get("cat") == "Node" else None
        if run is None:
            continue
        args = event.get("args", {})
        name = str(event["name"]).removesuffix("_kernel_time")
        entry = sums.setdefault(
            name,
            RawNodeTime(
                node=name,
                op_type=str(args.get("op_name", "")),
                precision=_ort_precision(args.get("input_type_shape", [])),
                per_run_us=[0.0] * len(runs),
            ),
        )
        entry.add(run, float(event["dur"]))
    return list(sums.values())


def _run_of(ts: float, starts: np.ndarray, runs: list[tuple[float, float]]) -> int | None:
    index = int(np.searchsorted(starts, ts, side="right")) - 1
    return index if index >= 0 and ts <= runs[index][1] else None


def _ort_precision(input_types: list[dict[str, Any]]) -> str:
    for entry in input_types[:1]:
        for element_type in entry:
            return ORT_TYPES.get(str(element_type), str(element_type))
    return ""


class GraphNames:
    """The file's node names, and which node produces each tensor (to map fused nodes back)."""

    def __init__(self, path: Path) -> None:
        graph = onnx.load(path, load_external_data=False).graph
        self.nodes = {node.name: node for node in graph.node if node.name}
        self.producers = {out: node for node in graph.node if node.name for out in node.output}

    def match(self, runtime_name: str, family: str) -> str:
        """'conv1_token_9', 'conv1/WithoutBiases' -> 'conv1'; 'r1_nchwc' (ORT names some fused
        nodes by their output) -> the node producing 'r1', walked back through fused
        activations to one of the runtime op's family ('conv1' for Conv+Relu -> 'r1')."""
        stripped = _TOKEN.sub("", runtime_name)
        for candidate in (runtime_name, stripped, runtime_name.split("/", 1)[0]):
            if candidate in self.nodes:
                return candidate
        node = self.producers.get(stripped)
        for _ in range(3):
            if node is None or op_family(node.op_type) == family or not node.input:
                break
            node = self.producers.get(node.input[0])
        if node is None or op_family(node.op_type) != family:
            node = self.producers.get(stripped)
        return node.name if node is not None else ""
