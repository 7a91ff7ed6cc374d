"""Where INT8 pays: int8_placed's per-node decision, a pure function of measured times.

Every node the quantizer quantized is a candidate. `fp32_us` is its time per inference in the
float graph, `int8_us` its time in the fully quantized graph with the Q/DQ nodes that serve it
(optistudio.core.passes.placement_times says how runtime times are attributed). It keeps INT8
when

    int8_us < (1 - margin) * fp32_us

and goes back to FP32 otherwise. A candidate with no time of its own on either side (fused
into a neighbour in both runs, or removed by the quantizer, as a Relu after a Conv) has no
evidence: it follows the candidate producing its first input, so a fused activation stays with
its Conv; with no such producer it keeps INT8, as the quantizer left it.

The variant differs from plain int8_static only when some measured candidates pay and some do
not; `refusal` says why in one sentence when it would not.
"""

from __future__ import annotations

from collections import Counter

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
    def measured(self) -> bool:
        return self.fp32_us > 0 or self.int8_us > 0


class Placement(BaseModel):
    """Which candidates keep INT8 and which go back to FP32."""

    model_config = ConfigDict(extra="forbid")

    int8: list[str] = Field(description="Candidates kept in INT8, in graph order.")
    fp32: list[str] = Field(description="Candidates back in FP32, in graph order.")
    fp32_op_types: dict[str, int] = Field(description="Op type -> candidates back in FP32.")
    measured: int = Field(description="Candidates with a time of their own on either side.")
    paying: int = Field(description="Measured candidates whose INT8 beat FP32 by the margin.")
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
    keeps = {cost.name: _pays(cost, margin) for cost in costs if cost.measured}
    decided = {cost.name: _followed(cost, by_name, keeps) for cost in costs}
    fp32 = [cost for cost in costs if not decided[cost.name]]
    return Placement(
        int8=[cost.name for cost in costs if decided[cost.name]],
        fp32=[cost.name for cost in fp32],
        fp32_op_types=dict(Counter(cost.op_type for cost in fp32).most_common()),
        measured=len(keeps),
        paying=sum(keeps.values()),
        margin=margin,
    )


def refusal(placement: Placement) -> str | None:
    """Why the placed variant would add nothing (no measured node pays, or every node does and
    the variant is plain int8_static), in one sentence; None when it differs from both."""
    total = len(placement.int8) + len(placement.fp32)
    if placement.measured == 0:
        return f"none of its {total} quantized nodes had a time of its own in either run."
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


def _pays(cost: NodeCost, margin: float) -> bool:
    return cost.int8_us < (1 - margin) * cost.fp32_us


def _followed(cost: NodeCost, by_name: dict[str, NodeCost], keeps: dict[str, bool]) -> bool:
    """The decision of `cost`, or of the first measured candidate up its producer chain."""
    seen: set[str] = set()
    current: NodeCost | None = cost
    while current is not None and current.name not in seen:
        if current.name in keeps:
            return keeps[current.name]
        seen.add(current.name)
        current = by_name.get(current.producer) if current.producer else None
    return True
