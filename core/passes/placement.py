"""Where INT8 pays: int8_placed's per-node decision, a pure function of measured times.

Every node the quantizer quantized is a candidate, with `fp32_us`, its time per inference in the
float graph, and `int8_us`, its time in the fully quantized graph with the Q/DQ nodes that serve
it (optistudio.core.passes.placement_times says how runtime times are attributed). A candidate
timed in both runs stands for itself; one missing from either run (fused into a neighbour: a
Relu folded into the Conv's FusedConv in FP32, or into the Conv's output Q in INT8) joins the
group of the candidate producing its first input, up the chain to one timed in both. A group
keeps INT8 when

    sum(int8_us) < (1 - margin) * sum(fp32_us)

over its members, and goes back to FP32 otherwise, so a fused activation stays with its Conv
and its own FP32 time is weighed with the Conv's. A group with no time on either side has no
evidence and keeps INT8, as the quantizer left it.

The variant differs from plain int8_static only when some groups timed in both runs pay and
some do not; `refusal` says why in one sentence when it would not.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from pydantic import BaseModel, ConfigDict, Field

REPORTED_OP_TYPES = 6


class NodeCost(BaseModel):
    """One candidate node and its two measured times."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Node name in the prepared float graph.")
    op_type: str
    fp32_us: float = Field(ge=0, description="Time per inference in FP32.")
    int8_us: float = Field(ge=0, description="Time per inference in INT8, its Q/DQ included.")
    producer: str | None = Field(
        default=None, description="The candidate producing its first input, if any."
    )

    @property
    def timed_in_both(self) -> bool:
        return self.fp32_us > 0 and self.int8_us > 0


class Placement(BaseModel):
    """Which candidates keep INT8 and which go back to FP32."""

    model_config = ConfigDict(extra="forbid")

    int8: list[str] = Field(description="Candidates kept in INT8, in graph order.")
    fp32: list[str] = Field(description="Candidates back in FP32, in graph order.")
    fp32_op_types: dict[str, int] = Field(description="Op type -> candidates back in FP32.")
    measured: int = Field(description="Candidates timed in both runs (each heads a group).")
    paying: int = Field(description="Of those, the ones whose group's INT8 beat FP32.")
    margin: float

    def note(self) -> str:
        """'INT8 kept on 3 of 5 quantized nodes ...; FP32 on 2: Add 2.'"""
        total = len(self.int8) + len(self.fp32)
        ops = list(self.fp32_op_types.items())
        shown = ", ".join(f"{op} {count}" for op, count in ops[:REPORTED_OP_TYPES])
        more = ", ..." if len(ops) > REPORTED_OP_TYPES else ""
        return (
            f"INT8 kept on {len(self.int8)} of {total} quantized nodes, where INT8 with its "
            f"Q/DQ ran at least {self.margin:.0%} faster than FP32 at one thread; FP32 on "
            f"{len(self.fp32)}: {shown}{more}."
        )


def place_int8(costs: list[NodeCost], *, margin: float) -> Placement:
    """Split `costs` (graph order) into INT8 and FP32 nodes; see the module docstring."""
    by_name = {cost.name: cost for cost in costs}
    heads = {cost.name: _head(cost, by_name) for cost in costs}
    groups: dict[str, list[NodeCost]] = defaultdict(list)
    for cost in costs:
        groups[heads[cost.name]].append(cost)
    keeps = {head: _pays(members, margin) for head, members in groups.items()}
    timed = [head for head in groups if by_name[head].timed_in_both]
    fp32 = [cost for cost in costs if not keeps[heads[cost.name]]]
    return Placement(
        int8=[cost.name for cost in costs if keeps[heads[cost.name]]],
        fp32=[cost.name for cost in fp32],
        fp32_op_types=dict(Counter(cost.op_type for cost in fp32).most_common()),
        measured=len(timed),
        paying=sum(keeps[head] for head in timed),
        margin=margin,
    )


def refusal(placement: Placement) -> str | None:
    """Why the placed variant would add nothing (no measured node pays, or every node does and
    the variant is plain int8_static), in one sentence; None when it differs from both."""
    total = len(placement.int8) + len(placement.fp32)
    if placement.measured == 0:
        return f"none of its {total} quantized nodes had a time of its own in both runs."
    if placement.paying == 0:
        return (
            f"INT8 with its Q/DQ was not {placement.margin:.0%} faster than FP32 on any of its "
            f"{placement.measured} timed quantized nodes at one thread, so the FP32 original "
            "is the variant."
        )
    if not placement.fp32:
        return (
            f"INT8 paid on every one of its {total} quantized nodes, so the variant would be "
            "int8_static's."
        )
    return None


def _pays(members: list[NodeCost], margin: float) -> bool:
    fp32_us = sum(cost.fp32_us for cost in members)
    int8_us = sum(cost.int8_us for cost in members)
    return (fp32_us == 0 and int8_us == 0) or int8_us < (1 - margin) * fp32_us


def _head(cost: NodeCost, by_name: dict[str, NodeCost]) -> str:
    """The first candidate timed in both runs up the producer chain of `cost` (itself when it
    is), else `cost` itself: the group it is decided with."""
    seen: set[str] = set()
    current: NodeCost | None = cost
    while current is not None and current.name not in seen:
        if current.timed_in_both:
            return current.name
        seen.add(current.name)
        current = by_name.get(current.producer) if current.producer else None
    return cost.name
