"""One tolerance rule per precision, held by bench's output check and optimize's judge alike.

A run at a precision agrees with ONNX Runtime FP32 on the CPU when every output's worst-sample
SNR (the numeric floor's measure, `optistudio.core.numerics.numeric_floor`: the reference's mean
energy per sample over the worst sample's error energy) reaches the precision's floor:

    precision   worst-sample SNR   about a worst cosine of   what it allows
    fp32        >= 45 dB           0.99998                   the same arithmetic in another order
    fp16        >= 25 dB           0.998                     a 10-bit mantissa through the graph
    bf16        >= 15 dB           0.985                     an 8-bit mantissa through the graph
    int8        >= 6 dB            0.89                      what quantization allows

(for an error uncorrelated with the signal, cosine ~ 1 / sqrt(1 + 10^(-SNR/10))). NaN or Inf in an
output always fails. The SNR is taken against the output's mean energy, not each sample's own,
so a sample whose output is nearly all zero (which INT8 rounds to exact zeros) does not fail a
run that got every other sample right, while a wrong answer (0 dB or less) fails everywhere.
The worst cosine is shown beside it, never judged on its own.

A mixed precision ('int8+bf16': INT8 layers, the rest in BF16) is held to the loosest of its
parts; weights in fewer bits than eight ('int4') to the INT8 rule. Optimize holds a variant to
the rule of what it computes in, and to its accuracy budget's floor when that is stricter; a
budget whose floor is off (None: outputs that vary from run to run) switches the rule off too.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

REFERENCE = "ONNX Runtime FP32 on the CPU"


class PrecisionRule(BaseModel):
    """How close a run at one precision must come to the FP32 reference."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    precision: str = Field(description="The precision the rule is for: fp32, fp16, bf16, int8.")
    min_snr_db: float = Field(
        description="Smallest worst-sample SNR (dB) of every output against the reference's."
    )

    @property
    def name(self) -> str:
        """'the BF16 rule'."""
        return f"the {self.precision.upper()} rule"

    def line(self) -> str:
        """'the BF16 rule: worst-sample SNR >= 15 dB on every output'."""
        return f"{self.name}: worst-sample SNR >= {self.min_snr_db:g} dB on every output"


RULES: dict[str, PrecisionRule] = {
    rule.precision: rule
    for rule in (
        PrecisionRule(precision="fp32", min_snr_db=45.0),
        PrecisionRule(precision="fp16", min_snr_db=25.0),
        PrecisionRule(precision="bf16", min_snr_db=15.0),
        PrecisionRule(precision="int8", min_snr_db=6.0),
    )
}
LOW_BITS = "int8"
"""The rule of any integer precision (int8, int4 weights)."""
MIXED = "mixed"
"""The precision of a recipe that keeps some nodes in FP32 and the rest in INT8 (int8_placed):
its loosest part is INT8, so it takes the INT8 rule."""


def rule_for(precision: str) -> PrecisionRule:
    """The rule of `precision`; of a mixed one ('int8+bf16') the loosest part's; of an integer
    one without a rule of its own ('int4') the INT8 rule's."""
    parts = [part.strip().lower() for part in precision.split("+") if part.strip()]
    rules = [RULES.get(part) or _integer_rule(part) for part in parts or ["fp32"]]
    return min(rules, key=lambda rule: rule.min_snr_db)


def _integer_rule(part: str) -> PrecisionRule:
    if part.startswith(("int", "uint")) or part == MIXED:
        return RULES[LOW_BITS]
    known = ", ".join(RULES)
    raise ValueError(f"no tolerance rule for precision {part!r}; the rules are for {known}")


def floor_for(precision: str | None, budget_floor_db: float | None) -> tuple[float | None, str]:
    """The floor a variant at `precision` is held to with a budget floor of `budget_floor_db`,
    and the words that say where it comes from: the stricter of the two, the rule's name when
    the rule decides; the budget's floor alone, with '', when it is off (None) or no precision
    is given."""
    if budget_floor_db is None or precision is None:
        return budget_floor_db, ""
    rule = rule_for(precision)
    if rule.min_snr_db >= budget_floor_db:
        return rule.min_snr_db, rule.name
    return budget_floor_db, ""
