"""Two profiles of one model (e.g. FP32 and its INT8 variant) compared op family by op family.

Op types are folded into families first (`optistudio.core.diagnose.operator_profile.op_family`: QLinearConv, ConvInteger and
Conv are all 'Conv'), so a row compares what the layers compute, not how each graph spells it.
For each family: ratio = time_B / time_A per inference; 'faster' when ratio < 1 - margin,
'slower' when ratio > 1 + margin, 'new' / 'gone' when only one side has it. Node times come
from the profilers, so they carry the profilers' run-to-run noise: a 5 % margin keeps single
microseconds from being called a change.

Two profiles compare when they are of one model: the same inputs (names, element types, dims
where both fix them) and the same outputs by name and element type, their dims compared only
where both declare the same rank (`_alike`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.diagnose.operator_profile import COMPUTE_FAMILIES, NodeTime, OperatorProfile
from optistudio.core.errors import InvalidSpec

DEFAULT_MARGIN = 0.05

Change = Literal["faster", "slower", "same", "new", "gone"]


class FamilyChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    family: str
    a_us: float
    b_us: float
    ratio: float | None = Field(description="b_us / a_us; None when A has none.")
    change: Change
    a_nodes: int
    b_nodes: int


class ProfileComparison(BaseModel):
    """A vs B by op family, and B's compute nodes that did not run in the precision asked."""

    model_config = ConfigDict(extra="forbid")

    a_model: str
    b_model: str
    a_ms: float = Field(description="A's plain median ms per inference.")
    b_ms: float
    ratio: float = Field(description="b_ms / a_ms (below 1: B is faster).")
    families: list[FamilyChange] = Field(description="Largest absolute change first.")
    expected_precision: str
    not_in_precision: list[NodeTime] = Field(
        description="B's compute nodes (Conv, MatMul, Gemm, ...) not in expected_precision."
    )


def compare_profiles(
    a: OperatorProfile,
    b: OperatorProfile,
    *,
    expected_precision: str | None = None,
    margin: float = DEFAULT_MARGIN,
) -> ProfileComparison:
    """Compare B against A. Refuses profiles of different models or different batch sizes.

    `expected_precision` defaults to int8 when B is quantized, else fp32.
    """
    _check_comparable(a, b)
    expected = expected_precision or ("int8" if b.quantized else "fp32")
    return ProfileComparison(
        a_model=a.model,
        b_model=b.model,
        a_ms=a.plain_ms,
        b_ms=b.plain_ms,
        ratio=b.plain_ms / a.plain_ms if a.plain_ms > 0 else 1.0,
        families=_families(a, b, margin),
        expected_precision=expected,
        not_in_precision=[
            n
            for n in b.nodes
            if n.family in COMPUTE_FAMILIES and n.precision and n.precision != expected
        ],
    )


def _check_comparable(a: OperatorProfile, b: OperatorProfile) -> None:
    if not (_alike(a.inputs, b.inputs) and _alike(a.outputs, b.outputs, ranks_may_differ=True)):
        raise InvalidSpec(
            f"{a.model} and {b.model} are different models (inputs {a.inputs} -> {a.outputs} "
            f"vs {b.inputs} -> {b.outputs}), so their profiles cannot be compared op by op.",
            hint="Compare a model with one of its own variants (e.g. its INT8 variant).",
        )
    if a.batch_size != b.batch_size:
        raise InvalidSpec(
            f"The profiles were taken at different batch sizes ({a.batch_size} and "
            f"{b.batch_size}); per-op times only compare at the same batch size.",
            hint="Profile both at one batch size.",
        )


def _alike(a: list[str], b: list[str], *, ranks_may_differ: bool = False) -> bool:
    """Signatures ('name:dtype:[?,3,224,224]') that agree but where one side left a dim dynamic
    ('?') that the other fixed: a variant's shape inference fixes what an export left open (a
    detector's boxes [?,?,?] become [?,?,4]). With `ranks_may_differ` (outputs), a declared
    rank that differs is no difference: the names and element types are what the model makes,
    and a tool's shape inference may re-declare a rank the export wrote (a Squeeze without axes
    declared [batch_size] by the export, [batch_size, 2] by onnxslim); dims of the same rank
    still agree, so a head of 10 classes is not one of 1000."""
    return len(a) == len(b) and all(
        _alike_one(x, y, ranks_may_differ) for x, y in zip(a, b, strict=True)
    )


def _alike_one(a: str, b: str, ranks_may_differ: bool) -> bool:
    head_a, _, dims_a = a.rpartition(":")
    head_b, _, dims_b = b.rpartition(":")
    sizes_a, sizes_b = dims_a.strip("[]").split(","), dims_b.strip("[]").split(",")
    if head_a != head_b:
        return False
    if len(sizes_a) != len(sizes_b):
        return ranks_may_differ
    return all(x == y or "?" in (x, y) for x, y in zip(sizes_a, sizes_b, strict=True))


def _families(a: OperatorProfile, b: OperatorProfile, margin: float) -> list[FamilyChange]:
    a_sums, b_sums = _family_sums(a.nodes), _family_sums(b.nodes)
    rows = []
    for family in sorted(set(a_sums) | set(b_sums)):
        a_us, a_nodes = a_sums.get(family, (0.0, 0))
        b_us, b_nodes = b_sums.get(family, (0.0, 0))
        ratio = b_us / a_us if a_us > 0 else None
        rows.append(
            FamilyChange(
                family=family,
                a_us=a_us,
                b_us=b_us,
                ratio=ratio,
                change=_change(a_nodes, b_nodes, ratio, margin),
                a_nodes=a_nodes,
                b_nodes=b_nodes,
            )
        )
    return sorted(rows, key=lambda r: -abs(r.b_us - r.a_us))


def _family_sums(nodes: list[NodeTime]) -> dict[str, tuple[float, int]]:
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for node in nodes:
        sums[node.family][0] += node.time_us
        sums[node.family][1] += 1
    return {family: (total, int(count)) for family, (total, count) in sums.items()}


def _change(a_nodes: int, b_nodes: int, ratio: float | None, margin: float) -> Change:
    if not a_nodes:
        return "new"
    if not b_nodes:
        return "gone"
    if ratio is None or abs(ratio - 1) <= margin:
        return "same"
    return "faster" if ratio < 1 else "slower"
