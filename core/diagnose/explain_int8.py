"""Why an INT8 variant is not faster: rule-based checks in plain words, each with a fix.

Each rule reads the quantized graph (what the quantizer produced), the CPU's ISA flags and,
when given, the runtime profile (what really ran, in which precision, for how long):

- cpu_int8: no VNNI / AMX (x86) or dot-product (Arm) instructions, so an int8 multiply-add
  takes several instructions and INT8 gains little over FP32;
- dynamic_conv: convolutions quantized dynamically (DynamicQuantizeLinear + ConvInteger): the
  activation range is computed on every run and ConvInteger has no fused fast CPU kernel;
- unfused_qdq: DequantizeLinear -> op -> QuantizeLinear around an op with no integer kernel,
  so the runtime dequantizes, runs the op in float and quantizes again;
- float_compute: Conv / MatMul / Gemm left in float (in the graph, or at run time);
- layout: time in layout conversions (Transpose, Reorder) the runtime inserted;
- conversions: time in quantize / dequantize nodes themselves;
- per_tensor: convolution weights with one scale for all channels (accuracy, not speed);
- not_faster: the INT8 profile is not faster than the float one (needs both profiles).

A rule that does not apply stays silent. Shares are of the profiled node time.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

import onnx
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.diagnose.operator_profile import (
    COMPUTE_FAMILIES,
    LAYOUT_OPS,
    QDQ_OPS,
    OperatorProfile,
    op_family,
)
from optistudio.core.diagnose.profile_compare import ProfileComparison
from optistudio.core.machine.environment import isa_flags

Severity = Literal["high", "medium", "info"]

INT8_INSTRUCTIONS = ("avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")
INT8_KERNELS = frozenset(
    {
        "Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Mul", "Concat", "MaxPool",
        "AveragePool", "GlobalAveragePool", "Relu", "Clip", "Sigmoid", "LeakyRelu", "Softmax",
        "Resize", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Gather", "Split",
        "Slice", "Pad", "Where", "ArgMax", "Identity", "DepthToSpace", "SpaceToDepth", "Tile",
        "Expand", "GatherElements", "InstanceNormalization",
    }
)  # fmt: skip
"""Op types ONNX Runtime's CPU provider runs in int8 between Q/DQ (QLinear* kernels or drops)."""
LAYOUT_SHARE = 0.10
CONVERSION_SHARE = 0.15
NOT_FASTER = 0.95
_COMPUTE_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")


class Finding(BaseModel):
    """One reason INT8 may not pay off, with the change to try."""

    model_config = ConfigDict(extra="forbid")

    rule: str
    severity: Severity
    title: str
    detail: str
    suggestion: str
    nodes: list[str] = Field(default_factory=list, description="Graph nodes concerned.")
    time_us: float | None = Field(default=None, description="Their time per inference.")
    share: float | None = Field(default=None, description="Their share of the profiled time.")


def explain_int8(
    quantized_model: Path,
    *,
    profile: OperatorProfile | None = None,
    comparison: ProfileComparison | None = None,
    isa: list[str] | None = None,
) -> list[Finding]:
    """Findings for a quantized variant, most severe and most costly first.

    `profile` is the variant's profile, `comparison` float vs variant; `isa` defaults to this
    CPU's flags (the worker's, where the variant runs).
    """
    graph = onnx.load(quantized_model, load_external_data=False).graph
    ops = {node.op_type for node in graph.node}
    if not any(op in QDQ_OPS or op.startswith("QLinear") or op.endswith("Integer") for op in ops):
        return [_not_quantized(quantized_model.name)]
    findings = [
        *_cpu_int8(isa_flags() if isa is None else isa),
        *_dynamic_conv(graph, profile),
        *_unfused_qdq(graph, profile),
        *_float_compute(graph, profile),
        *_layout(profile),
        *_conversions(profile),
        *_per_tensor(graph),
        *_not_faster(comparison),
    ]
    rank = {"high": 0, "medium": 1, "info": 2}
    return sorted(findings, key=lambda f: (rank[f.severity], -(f.share or 0.0)))


def _not_quantized(name: str) -> Finding:
    return Finding(
        rule="not_quantized",
        severity="high",
        title="This model is not quantized",
        detail=f"{name} holds no QuantizeLinear / DequantizeLinear or integer op, so it runs "
        "in float whatever precision is asked for.",
        suggestion="Make an INT8 variant first (Optimize: int8_static for CNNs, int8_dynamic "
        "for transformers) and explain that.",
    )


def _cpu_int8(flags: list[str]) -> list[Finding]:
    if any(flag in flags for flag in INT8_INSTRUCTIONS):
        return []
    return [
        Finding(
            rule="cpu_int8",
            severity="high",
            title="This CPU has no int8 dot-product instructions",
            detail="None of " + ", ".join(INT8_INSTRUCTIONS) + " is present (flags: "
            f"{', '.join(flags) or 'none reported'}). Without VNNI or AMX an int8 "
            "multiply-add takes three instructions (vpmaddubsw, vpmaddwd, vpaddd), so int8 "
            "kernels are barely faster than FP32 ones and the quantize/dequantize work is a net "
            "loss.",
            suggestion="Run INT8 on a CPU with AVX512-VNNI, AVX-VNNI or AMX (Intel Cascade Lake "
            "or newer, AMD Zen 4), or keep FP32 here (graph and fusion recipes).",
        )
    ]


def _dynamic_conv(graph: onnx.GraphProto, profile: OperatorProfile | None) -> list[Finding]:
    convs = [node for node in graph.node if node.op_type == "ConvInteger"]
    if not convs:
        return []
    producers = {out: node for node in graph.node for out in node.output}
    dynamic = {
        producers[name].name
        for conv in convs
        for name in conv.input[:1]
        if name in producers and producers[name].op_type == "DynamicQuantizeLinear"
    }
    names = [conv.name for conv in convs] + sorted(dynamic)
    time_us, share = _time_of(profile, names)
    return [
        Finding(
            rule="dynamic_conv",
            severity="high",
            title=f"{len(convs)} convolution(s) are quantized dynamically",
            detail="DynamicQuantizeLinear measures each activation's range on every run and "
            "ConvInteger has no fused int8 kernel on CPU (it returns int32 that is cast and "
            "rescaled in float). Dynamic quantization suits MatMul-heavy transformers, not "
            "CNNs." + _timing(time_us, share),
            suggestion="Use static QDQ quantization with calibration data instead (recipe "
            "int8_static, or Auto, which picks it for CNNs).",
            nodes=names,
            time_us=time_us,
            share=share,
        )
    ]


def _unfused_qdq(graph: onnx.GraphProto, profile: OperatorProfile | None) -> list[Finding]:
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    stranded = [
        node
        for node in graph.node
        if node.op_type not in INT8_KERNELS | QDQ_OPS
        and any(_made_by(producers, name, "DequantizeLinear") for name in node.input)
        and any(
            c.op_type == "QuantizeLinear" for out in node.output for c in consumers.get(out, [])
        )
    ]
    if not stranded:
        return []
    op_types = sorted({node.op_type for node in stranded})
    around = [_neighbours(node, producers, consumers) for node in stranded]
    names = [node.name for node in stranded] + [n for group in around for n in group]
    time_us, share = _time_of(profile, names)
    return [
        Finding(
            rule="unfused_qdq",
            severity="high" if (share or 0) >= CONVERSION_SHARE else "medium",
            title=f"Q/DQ pairs left around {', '.join(op_types)}: no integer kernel",
            detail=f"{len(stranded)} node(s) of type {', '.join(op_types)} sit between "
            "DequantizeLinear and QuantizeLinear, but the runtime has no int8 kernel for them: "
            "it dequantizes, runs them in float and quantizes again, paying two conversions "
            "for nothing." + _timing(time_us, share),
            suggestion=f"Exclude {', '.join(op_types)} from quantization (leave "
            f"{', '.join(op_types)} out of op_types_to_quantize, or put "
            f"{', '.join(repr(n.name) for n in stranded[:5])} in nodes_to_exclude; the "
            "int8_mixed recipe keeps sensitive layers in float the same way).",
            nodes=[node.name for node in stranded],
            time_us=time_us,
            share=share,
        )
    ]


def _made_by(producers: dict[str, onnx.NodeProto], name: str, op_type: str) -> bool:
    node = producers.get(name)
    return node is not None and node.op_type == op_type


def _neighbours(
    node: onnx.NodeProto,
    producers: dict[str, onnx.NodeProto],
    consumers: dict[str, list[onnx.NodeProto]],
) -> list[str]:
    before = [producers[n].name for n in node.input if _made_by(producers, n, "DequantizeLinear")]
    after = [c.name for out in node.output for c in consumers.get(out, []) if c.op_type in QDQ_OPS]
    return before + after


def _float_compute(graph: onnx.GraphProto, profile: OperatorProfile | None) -> list[Finding]:
    producers = {out: node for node in graph.node for out in node.output}
    in_graph = [
        node.name or node.op_type
        for node in graph.node
        if node.op_type in _COMPUTE_OPS
        and not all(_made_by(producers, name, "DequantizeLinear") for name in node.input[:2])
    ]
    at_runtime = [
        n.graph_node or n.node
        for n in (profile.nodes if profile else [])
        if n.family in COMPUTE_FAMILIES and n.precision not in ("int8", "")
    ]
    names = list(dict.fromkeys(in_graph + at_runtime))
    if not names:
        return []
    time_us, share = _time_of(profile, names)
    where = (
        f"{len(in_graph)} left in float by the quantizer"
        + (f", {len(at_runtime)} run in float by {profile.backend}" if profile else "")
        + f": {', '.join(names[:8])}"
        + (" ..." if len(names) > 8 else "")
    )
    return [
        Finding(
            rule="float_compute",
            severity="high" if (share or 0) >= 0.25 else "medium",
            title=f"{len(names)} Conv/MatMul/Gemm node(s) run in float",
            detail=f"Heavy ops that stay in float keep most of the FP32 cost ({where})."
            + _timing(time_us, share),
            suggestion="If they were excluded on purpose (mixed precision for accuracy) this is "
            "the price; otherwise quantize them (add their op types to op_types_to_quantize). "
            "Where the graph is quantized but the runtime ran them in float, that runtime has no "
            "int8 kernel for this form: try the other backend (OpenVINO runs QDQ and NNCF "
            "models with int8 kernels) or static QDQ instead of dynamic.",
            nodes=names,
            time_us=time_us,
            share=share,
        )
    ]


def _layout(profile: OperatorProfile | None) -> list[Finding]:
    if profile is None:
        return []
    nodes = [n for n in profile.nodes if n.op_type in LAYOUT_OPS]
    share = sum(n.share for n in nodes)
    if share < LAYOUT_SHARE:
        return []
    return [
        Finding(
            rule="layout",
            severity="medium",
            title=f"{share:.0%} of the time goes to layout conversions",
            detail=f"{profile.backend} inserted {len(nodes)} Transpose/Reorder node(s) to move "
            "tensors between layouts (ONNX Runtime runs QLinearConv in NHWC, so it transposes "
            "around it; OpenVINO reorders into blocked layouts)."
            + _timing(sum(n.time_us for n in nodes), share),
            suggestion="Export the model channels-last so the conversions cancel, keep long "
            "runs of quantized convolutions together (no float op between them), or try "
            "the other backend.",
            nodes=[n.graph_node or n.node for n in nodes],
            time_us=sum(n.time_us for n in nodes),
            share=share,
        )
    ]


def _conversions(profile: OperatorProfile | None) -> list[Finding]:
    if profile is None:
        return []
    nodes = [n for n in profile.nodes if n.family == op_family("QuantizeLinear")]
    share = sum(n.share for n in nodes)
    if share < CONVERSION_SHARE:
        return []
    return [
        Finding(
            rule="conversions",
            severity="medium",
            title=f"{share:.0%} of the time goes to quantize / dequantize",
            detail=f"{len(nodes)} quantize/dequantize node(s) ran on their own instead of being "
            "fused into integer kernels." + _timing(sum(n.time_us for n in nodes), share),
            suggestion="Fewer precision boundaries: exclude isolated ops between quantized "
            "ones, quantize whole blocks, and keep the graph's inputs/outputs conversions only.",
            nodes=[n.graph_node or n.node for n in nodes],
            time_us=sum(n.time_us for n in nodes),
            share=share,
        )
    ]


def _per_tensor(graph: onnx.GraphProto) -> list[Finding]:
    sizes = {init.name: _elements(init.dims) for init in graph.initializer}
    weight_dq = {
        node.output[0]: node
        for node in graph.node
        if node.op_type == "DequantizeLinear" and node.input[0] in sizes
    }
    per_tensor = [
        node.name or node.op_type
        for node in graph.node
        if node.op_type == "Conv"
        and len(node.input) > 1
        and node.input[1] in weight_dq
        and sizes.get(weight_dq[node.input[1]].input[1], 1) == 1
    ]
    if not per_tensor:
        return []
    return [
        Finding(
            rule="per_tensor",
            severity="info",
            title=f"{len(per_tensor)} convolution weight(s) use one scale for all channels",
            detail="Per-tensor weight scales make every output channel share the range of the "
            "widest one; narrow channels lose precision. This costs accuracy, not speed.",
            suggestion="Quantize weights per channel (the int8 recipes do by default; opset 13 or "
            "newer is needed) if the accuracy drop matters.",
            nodes=per_tensor,
        )
    ]


def _not_faster(comparison: ProfileComparison | None) -> list[Finding]:
    if comparison is None or comparison.ratio < NOT_FASTER:
        return []
    slower = [f.family for f in comparison.families if f.change in ("slower", "new")][:5]
    return [
        Finding(
            rule="not_faster",
            severity="high",
            title=f"INT8 is not faster: {comparison.b_ms:.3f} ms vs {comparison.a_ms:.3f} ms",
            detail=f"{comparison.b_model} takes {comparison.ratio:.2f}x the time of "
            f"{comparison.a_model} per inference."
            + (f" Slower or new in INT8: {', '.join(slower)}." if slower else ""),
            suggestion="Fix the findings above in order; if none applies, the model may be too "
            "small or memory-bound for INT8 to pay: keep FP32, or try the other backend.",
        )
    ]


def _time_of(
    profile: OperatorProfile | None, names: Iterable[str]
) -> tuple[float | None, float | None]:
    if profile is None:
        return None, None
    wanted = set(names)
    hits = [n for n in profile.nodes if n.graph_node in wanted or n.node in wanted]
    return sum(n.time_us for n in hits), sum(n.share for n in hits)


def _timing(time_us: float | None, share: float | None) -> str:
    if time_us is None or share is None:
        return ""
    return f" In the profile they take {time_us:.1f} µs per inference ({share:.0%} of the time)."


def _elements(dims: Iterable[int]) -> int:
    count = 1
    for dim in dims:
        count *= dim
    return count
