"""Each quantized node's time in FP32 and in INT8, for int8_placed's decision.

Both graphs (the prepared float graph and its full INT8 QDQ quantization) run on ONNX Runtime
with all graph optimisations, one thread, no spinning, on the same inputs (the first calibration
batches, in turn); the profiler's per-node times (optistudio.core.measure.node_times) give each
executed node's median over the runs. An executed node is attributed to a node of its file:

1. by name (`GraphNames.match`: 'conv1_token_9' -> 'conv1', 'r1_nchwc' -> the Conv behind
   'r1');
2. a node the runtime added (a layout 'Transpose', 'ReorderOutput') to an attributed neighbour
   in the graph the runtime executed: the node producing its first input, else one reading its
   output;
3. in the INT8 graph a QuantizeLinear / DequantizeLinear still executed (not fused) to the
   quantized nodes it serves, its time split evenly: a DQ's quantized readers, a Q's through
   its DQs; with none, the quantized node producing the Q's input.

A node the quantizer quantized (reads a DQ output) or removed (a Relu folded into the Conv's
Q) is a candidate; its producer is the candidate making its first input in the float graph.
Times of nodes that are no candidate, or that nothing attributes, are left out of the decision.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx

from optistudio.core.backends import SessionOptions
from optistudio.core.measure.node_times import GraphNames, OrtProfiler, RawNodeTime, op_family
from optistudio.core.passes.placement import NodeCost
from optistudio.core.passes.prepare import QDQ_OPS, uses_external

Feeds = dict[str, np.ndarray]
_Q, _DQ = "QuantizeLinear", "DequantizeLinear"


def node_costs(
    fp32: Path, int8: Path, feeds: Sequence[Feeds], *, runs: int, warmup: int, work_dir: Path
) -> list[NodeCost]:
    """The candidates of `int8` (quantized from `fp32`) with their two times, in graph order."""
    fp32_us, raw_int8 = attributed([fp32, int8], feeds, runs=runs, warmup=warmup, work_dir=work_dir)
    float_graph = onnx.load(fp32, load_external_data=False).graph
    quantized_graph = onnx.load(int8, load_external_data=False).graph
    int8_us = spread_conversions(raw_int8, quantized_graph)
    return candidates(float_graph, quantized_graph, fp32_us, int8_us)


def attributed(
    models: Sequence[Path], feeds: Sequence[Feeds], *, runs: int, warmup: int, work_dir: Path
) -> list[dict[str, float]]:
    """Median µs per inference of each node of each model's file (steps 1 and 2 above), the
    models run in turn so that a busy machine slows them alike."""
    folders = [work_dir / f"model-{index}" for index in range(len(models))]
    kept = [
        None if uses_external(model) else folder / "optimized.onnx"
        for model, folder in zip(models, folders, strict=True)
    ]
    raws = operator_profiles(models, feeds, runs=runs, warmup=warmup, folders=folders, keep=kept)
    return [_by_file_node(m, raw, k) for m, raw, k in zip(models, raws, kept, strict=True)]


def _by_file_node(model: Path, raw: list[RawNodeTime], executed: Path | None) -> dict[str, float]:
    names = GraphNames(model)
    matched = {node.node: names.match(node.node, op_family(node.op_type)) for node in raw}
    if executed is not None and executed.exists():
        matched = _through_neighbours(matched, onnx.load(executed, load_external_data=False))
    times: dict[str, float] = defaultdict(float)
    for node in raw:
        if matched.get(node.node):
            times[matched[node.node]] += node.median_us
    return dict(times)


def operator_profiles(
    models: Sequence[Path],
    feeds: Sequence[Feeds],
    *,
    runs: int,
    warmup: int,
    folders: Sequence[Path],
    keep: Sequence[Path | None],
) -> list[list[RawNodeTime]]:
    """ONNX Runtime's per-node times of each model at one thread, the models taking turns on
    each feed (taken in turn) for `warmup` and then `runs` runs; `keep` receives the graph the
    runtime executed."""
    options = SessionOptions(threads=1, spin_wait=False)
    profilers: list[OrtProfiler] = []
    try:
        for model, folder, executed in zip(models, folders, keep, strict=True):
            profilers.append(OrtProfiler(model, options, folder, optimized_model=executed))
        for feed in itertools.islice(itertools.cycle(feeds), warmup + runs):
            for profiler in profilers:
                profiler.run(feed)
        return [profiler.finish(warmup) for profiler in profilers]
    finally:
        for profiler in profilers:
            profiler.close()


def _through_neighbours(matched: dict[str, str], executed: onnx.ModelProto) -> dict[str, str]:
    """Runtime nodes with no file node take an attributed neighbour's (step 2)."""
    nodes = {node.name: node for node in executed.graph.node}
    makers = {out: node.name for node in executed.graph.node for out in node.output}
    takers: dict[str, list[str]] = defaultdict(list)
    for node in executed.graph.node:
        for name in node.input:
            takers[name].append(node.name)
    found = dict(matched)
    for name in [name for name, graph_node in matched.items() if not graph_node]:
        node = nodes.get(name)
        if node is None:
            continue
        around = [makers.get(tensor, "") for tensor in node.input[:1]]
        around += [taker for out in node.output for taker in takers.get(out, [])]
        found[name] = next((matched[n] for n in around if matched.get(n)), "")
    return found


def spread_conversions(times: dict[str, float], graph: onnx.GraphProto) -> dict[str, float]:
    """`times` with each Q/DQ node's time moved to the quantized nodes it serves (step 3)."""
    served = _served(graph)
    spread: dict[str, float] = defaultdict(float)
    for name, us in times.items():
        if name not in served:
            spread[name] += us
            continue
        for target in served[name]:
            spread[target] += us / len(served[name])
    return dict(spread)


def _served(graph: onnx.GraphProto) -> dict[str, list[str]]:
    """Q/DQ node name -> the quantized nodes it serves ([] when none)."""
    makers = {out: node for node in graph.node for out in node.output}
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    quantized = set(quantized_nodes(graph))

    def quantized_readers(dq: onnx.NodeProto) -> list[str]:
        return [n.name for n in readers[dq.output[0]] if n.name in quantized]

    served: dict[str, list[str]] = {}
    for node in graph.node:
        if node.op_type == _DQ:
            targets = quantized_readers(node)
            q = makers.get(node.input[0])
            served[node.name] = targets or (_maker_if(q, makers, quantized) if q else [])
        elif node.op_type == _Q:
            dqs = [n for n in readers[node.output[0]] if n.op_type == _DQ]
            targets = [name for dq in dqs for name in quantized_readers(dq)]
            served[node.name] = list(dict.fromkeys(targets)) or _maker_if(node, makers, quantized)
    return served


def _maker_if(
    q: onnx.NodeProto, makers: dict[str, onnx.NodeProto], quantized: set[str]
) -> list[str]:
    """[the quantized node producing the Q's input], or []."""
    if q.op_type != _Q:
        return []
    maker = makers.get(q.input[0])
    return [maker.name] if maker is not None and maker.name in quantized else []


def quantized_nodes(graph: onnx.GraphProto) -> list[str]:
    """Names of the nodes (other than Q/DQ) that read a DequantizeLinear output, graph order."""
    dequantized = {out for node in graph.node if node.op_type == _DQ for out in node.output}
    return [
        node.name
        for node in graph.node
        if node.op_type not in QDQ_OPS and dequantized.intersection(node.input)
    ]


def candidates(
    float_graph: onnx.GraphProto,
    quantized_graph: onnx.GraphProto,
    fp32_us: dict[str, float],
    int8_us: dict[str, float],
) -> list[NodeCost]:
    """The float graph's nodes the quantizer quantized or removed, with their times."""
    quantized = set(quantized_nodes(quantized_graph))
    present = {node.name for node in quantized_graph.node}
    picked = [n for n in float_graph.node if n.name in quantized or n.name not in present]
    names = {node.name for node in picked}
    makers = {out: node.name for node in float_graph.node for out in node.output}
    return [
        NodeCost(
            name=node.name,
            op_type=node.op_type,
            fp32_us=fp32_us.get(node.name, 0.0),
            int8_us=int8_us.get(node.name, 0.0),
            producer=_first_maker(node, makers, names),
        )
        for node in picked
    ]


def _first_maker(node: onnx.NodeProto, makers: dict[str, str], names: set[str]) -> str | None:
    """The candidate producing the first input of `node` that some node produces."""
    made = [makers[name] for name in node.input if name in makers]
    return made[0] if made and made[0] in names else None
