"""FP16: store weights and compute in half precision, keeping fragile ops in FP32.

Conversion is ONNX Runtime's `onnxruntime.transformers.float16.convert_float_to_float16`; ops
in its DEFAULT_OP_BLOCK_LIST (no FP16 kernels, e.g. TopK, Range) always stay FP32, and
`keep_io_types` puts Casts at the graph's edges so callers still feed and get float32.

Automatic fallback (greedy, one op type per round): the FP16 model's first output is compared
with the FP32 parent's on FALLBACK_SAMPLES synthetic samples (mean per-sample cosine, see
optistudio.core.numerics.accuracy). While that cosine is below `tolerance_cosine`, each op type that does arithmetic
and is still in FP16 is tried in FP32, one at a time; the one that raises the cosine most is
kept in FP32. It stops within tolerance, after `max_fallback_rounds`, or when no single op type
helps. The cost is one conversion and one short comparison per op type per round.

Limits, worth knowing: a blocked node computes in FP32 and keeps FP32 weights, but the converter
still casts its output to FP16 before the next node, so blocking fixes errors inside an op
(weights beyond FP16's range, long accumulations), not activations that overflow 65504. And the
comparison runs on ONNX Runtime CPU, which computes most FP16 ops in FP32 behind inserted Casts:
an overflow that only happens in true FP16 kernels (GPUs) is not seen here.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import onnx
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.errors import (
    InferenceFailed,
    InvalidSpec,
    ModelLoadError,
    ModelRejected,
    PassFailed,
)
from optistudio.core.machine.environment import isa_flags
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import NO_SIZE_LIMIT, accuracy_report
from optistudio.core.passes.base import PassContext, PassInfo, PassReport

logger = logging.getLogger(__name__)

FALLBACK_SAMPLES = 8
"""Synthetic samples the automatic fallback compares on (batch 1, default dynamic dims)."""

EXACT_OPS = frozenset(
    {
        "Cast", "Concat", "Constant", "ConstantOfShape", "Expand", "Flatten", "Gather",
        "GatherElements", "GatherND", "Identity", "Pad", "Reshape", "Shape", "Size", "Slice",
        "Split", "Squeeze", "Tile", "Transpose", "Unsqueeze",
    }
)  # fmt: skip
"""Ops that only move or reshape data: FP16 loses nothing there, so fallback never tries them."""

NATIVE_FP16_FLAGS = ("avx512_fp16", "amx_fp16")
NO_NATIVE_FP16 = (
    "this CPU has no native FP16 compute; FP16 usually runs slower than FP32 on it with "
    "ONNX Runtime CPU (weights take half the space, but most kernels convert to FP32 and back)"
)
_LARGE_PROTO = 2**31 - 1


class Fp16Config(BaseModel):
    """Options of the FP16 pass."""

    model_config = ConfigDict(extra="forbid")

    keep_io_types: bool = Field(
        default=True,
        description="Keep float32 model inputs and outputs (Casts are added inside the graph).",
    )
    op_block_list: list[str] = Field(
        default_factory=list,
        description="Op types to keep in FP32, on top of ONNX Runtime's default block list.",
    )
    node_block_list: list[str] = Field(
        default_factory=list, description="Node names to keep in FP32."
    )
    auto_fallback: bool = Field(
        default=True,
        description="Measure the FP16 model against the original and move the op types with "
        "the largest error back to FP32 until it is within tolerance.",
    )
    tolerance_cosine: float = Field(
        default=0.999,
        ge=-1,
        le=1,
        description="Smallest mean cosine to the FP32 output, on synthetic data, that needs "
        "no fallback.",
    )
    max_fallback_rounds: int = Field(
        default=5, ge=0, le=50, description="At most this many op types are moved to FP32."
    )


def run_fp16(model: Path, out: Path, config: Fp16Config, context: PassContext) -> PassReport:
    """Convert `model` to FP16 at `out`, with the automatic FP32 fallback when enabled."""
    base = _load_with_shapes(Path(model))
    context.progress(0.0, "converting to FP16")
    blocked = list(config.op_block_list)
    _save(_convert(base, config, blocked), Path(out))
    details: dict[str, Any] = {}
    warnings = _cpu_warnings(context)
    if config.auto_fallback:
        fallback = _Fallback(Path(model), base, config, context)
        blocked, details["fallback"] = fallback.run(Path(out), warnings)
        if blocked != config.op_block_list:
            _save(_convert(base, config, blocked), Path(out))
    context.progress(1.0, "FP16 model written")
    details |= _summary(Path(model), Path(out), config, blocked)
    return PassReport(output=Path(out), details=details, warnings=warnings)


class _Fallback:
    """The greedy search for op types to keep in FP32 (see the module docstring)."""

    def __init__(
        self, model: Path, base: onnx.ModelProto, config: Fp16Config, context: PassContext
    ) -> None:
        self.model = model
        self.base = base
        self.config = config
        self.context = context
        self.trial = Path(context.work_dir) / "fp16_trial.onnx"
        self.data: SyntheticDataset | None = None

    def run(self, converted: Path, warnings: list[str]) -> tuple[list[str], dict[str, Any]]:
        """The op types to block, and a record of each round, for the report."""
        blocked = list(self.config.op_block_list)
        try:
            inputs = inspect_model(self.model, max_bytes=NO_SIZE_LIMIT).inputs
            self.data = SyntheticDataset(inputs, samples=FALLBACK_SAMPLES)
            cosine = self._cosine(converted)
        except (InferenceFailed, InvalidSpec) as exc:
            warnings.append(f"automatic FP32 fallback skipped: {exc.message}")
            return blocked, {"skipped": exc.message}
        rounds: list[dict[str, Any]] = [{"round": 0, "kept_in_fp32": None, "cosine": cosine}]
        for number in range(1, self.config.max_fallback_rounds + 1):
            if cosine >= self.config.tolerance_cosine:
                break
            choice = self._best_addition(blocked, number)
            if choice is None or choice[1] <= cosine:
                break
            blocked.append(choice[0])
            cosine = choice[1]
            rounds.append({"round": number, "kept_in_fp32": choice[0], "cosine": cosine})
        self.trial.unlink(missing_ok=True)
        if cosine < self.config.tolerance_cosine:
            warnings.append(self._shortfall(cosine, len(rounds) - 1))
        return blocked, self._record(rounds, cosine)

    def _best_addition(self, blocked: list[str], number: int) -> tuple[str, float] | None:
        candidates = _arithmetic_op_types(self.base, blocked)
        scores = {}
        for index, op_type in enumerate(candidates):
            done = (number - 1 + index / len(candidates)) / self.config.max_fallback_rounds
            self.context.progress(0.1 + 0.8 * done, f"fallback round {number}: trying {op_type}")
            _save(_convert(self.base, self.config, [*blocked, op_type]), self.trial)
            scores[op_type] = self._cosine(self.trial)
        if not scores:
            return None
        best = max(scores, key=lambda op_type: scores[op_type])
        return best, scores[best]

    def _cosine(self, candidate: Path) -> float:
        assert self.data is not None
        try:
            return accuracy_report(self.model, candidate, self.data).mean_cosine
        except (ModelLoadError, ModelRejected) as exc:
            raise PassFailed(f"The FP16 model cannot be used: {exc.message}") from exc

    def _shortfall(self, cosine: float, rounds: int) -> str:
        return (
            f"FP16 output cosine {cosine:.5f} is still below the tolerance "
            f"{self.config.tolerance_cosine} after {rounds} fallback round(s); check accuracy "
            "on real data, or block more op types or nodes."
        )

    def _record(self, rounds: list[dict[str, Any]], cosine: float) -> dict[str, Any]:
        return {
            "method": "greedy: each round keeps in FP32 the one op type that raises the mean "
            "cosine to the FP32 output most",
            "data": self.data.description if self.data else "",
            "tolerance_cosine": self.config.tolerance_cosine,
            "cosine_before": rounds[0]["cosine"],
            "cosine_after": cosine,
            "rounds": rounds,
        }


def _load_with_shapes(path: Path) -> onnx.ModelProto:
    try:
        model = onnx.load(path)
    except Exception as exc:  # protobuf and onnx raise many kinds
        raise PassFailed(f"Cannot read {path.name!r} as an ONNX model: {exc}") from exc
    try:
        # The converter needs value types to place Casts around FP32 nodes.
        return onnx.shape_inference.infer_shapes(model)
    except Exception as exc:  # shape inference fails on some custom ops and >2 GB models
        logger.info("shape inference failed before FP16 conversion: %s", exc)
        return model


def _convert(base: onnx.ModelProto, config: Fp16Config, op_types: list[str]) -> onnx.ModelProto:
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST, convert_float_to_float16

    model = onnx.ModelProto()
    model.CopyFrom(base)  # the converter edits its argument in place
    try:
        converted = convert_float_to_float16(
            model,
            keep_io_types=config.keep_io_types,
            disable_shape_infer=True,
            op_block_list=[*DEFAULT_OP_BLOCK_LIST, *op_types],
            node_block_list=config.node_block_list,
        )
    except Exception as exc:  # the converter raises bare asserts and ValueErrors
        raise PassFailed(
            f"FP16 conversion failed: {exc or type(exc).__name__}",
            hint="Keep the op types it names in FP32 (op_block_list), or skip this pass.",
        ) from exc
    _sort_topologically(converted.graph)
    return converted


def _sort_topologically(graph: onnx.GraphProto) -> None:
    """Reorder nodes so each follows its producers (the converter appends Casts at the end)."""
    nodes = list(graph.node)
    producer = {name: i for i, node in enumerate(nodes) for name in node.output if name}
    needs = [
        sorted({producer[name] for name in _consumed(node) if producer.get(name, i) != i})
        for i, node in enumerate(nodes)
    ]
    order: list[int] = []
    state = [0] * len(nodes)  # 0 unseen, 1 on the stack, 2 placed
    for root in range(len(nodes)):
        stack = [root] if state[root] == 0 else []
        while stack:
            top = stack[-1]
            state[top] = 1
            pending = [dep for dep in needs[top] if state[dep] == 0]
            if pending:
                stack.append(pending[0])
                continue
            stack.pop()
            if state[top] != 2:
                state[top] = 2
                order.append(top)
    sorted_nodes = [onnx.NodeProto.FromString(nodes[i].SerializeToString()) for i in order]
    del graph.node[:]
    graph.node.extend(sorted_nodes)


def _consumed(node: onnx.NodeProto) -> set[str]:
    """Names a node reads, including those its subgraphs take from the outer scope."""
    names = set(node.input)
    for attribute in node.attribute:
        for subgraph in [attribute.g, *attribute.graphs]:
            for inner in subgraph.node:
                names |= _consumed(inner)
    return names


def _arithmetic_op_types(model: onnx.ModelProto, blocked: list[str]) -> list[str]:
    from onnxruntime.transformers.float16 import DEFAULT_OP_BLOCK_LIST

    skip = EXACT_OPS | set(blocked) | set(DEFAULT_OP_BLOCK_LIST)
    return sorted({node.op_type for node in model.graph.node} - skip)


def _save(model: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    large = model.ByteSize() > _LARGE_PROTO
    onnx.save_model(
        model, path, save_as_external_data=large, location=f"{path.name}.data" if large else None
    )


def _cpu_warnings(context: PassContext) -> list[str]:
    native = any(flag in isa_flags() for flag in NATIVE_FP16_FLAGS)
    return [] if native or context.target_backend != "onnxruntime" else [NO_NATIVE_FP16]


def _summary(model: Path, out: Path, config: Fp16Config, blocked: list[str]) -> dict[str, Any]:
    converted = onnx.load(out, load_external_data=False)
    fp16 = [t for t in converted.graph.initializer if t.data_type == onnx.TensorProto.FLOAT16]
    return {
        "kept_in_fp32": {"op_types": blocked, "nodes": config.node_block_list},
        "keep_io_types": config.keep_io_types,
        "fp16_initializers": len(fp16),
        "size_bytes_before": _size(model),
        "size_bytes_after": _size(out),
    }


def _size(path: Path) -> int:
    data = path.with_name(f"{path.name}.data")
    return path.stat().st_size + (data.stat().st_size if data.exists() else 0)


FP16 = PassInfo(
    name="fp16",
    label="FP16",
    description="Converts weights and computation to 16-bit floats: half the model size, and "
    "faster on GPUs and CPUs with native FP16 arithmetic (on other CPUs it is usually slower). "
    "Inputs and outputs stay float32 by default. Op types that lose too much accuracy in FP16 "
    "are found automatically, by comparing with the original on synthetic data, and kept in "
    "FP32.",
    config="optistudio.core.passes.fp16:Fp16Config",
    implementation="optistudio.core.passes.fp16:run_fp16",
    produces_precision="fp16",
)
