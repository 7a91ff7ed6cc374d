"""Auto's rule for decoders: fastest at batch 1 within the perplexity budget."""

from __future__ import annotations

import pytest

from optistudio.core.llm.choice import DecoderCandidate, fastest_within_budget


def _candidates(int4_increase: float) -> list[DecoderCandidate]:
    return [
        DecoderCandidate(name="fp32", tokens_per_s=50, perplexity_increase=0.0),
        DecoderCandidate(name="int8_weight_only", tokens_per_s=80, perplexity_increase=0.004),
        DecoderCandidate(
            name="int4_weight_only", tokens_per_s=120, perplexity_increase=int4_increase
        ),
    ]


@pytest.mark.parametrize(
    ("int4_increase", "chosen"),
    [(0.03, "int4_weight_only"), (0.05, "int4_weight_only"), (0.08, "int8_weight_only")],
    ids=["in-budget", "at-the-limit", "over-budget"],
)
def test_the_fastest_within_budget_is_chosen(int4_increase: float, chosen: str) -> None:
    choice = fastest_within_budget(_candidates(int4_increase), "fp32")

    assert choice.chosen == chosen


def test_the_reasons_say_why_not() -> None:
    choice = fastest_within_budget(_candidates(0.08), "fp32")

    assert "over the 5% budget" in choice.reasons["int4_weight_only"]
    assert "80.0 tokens/s" in choice.reasons["int8_weight_only"]


def test_the_original_is_chosen_when_nothing_else_passes() -> None:
    slow = [
        DecoderCandidate(name="fp32", tokens_per_s=50, perplexity_increase=0.0),
        DecoderCandidate(name="int4_weight_only", tokens_per_s=120, perplexity_increase=0.3),
    ]

    assert fastest_within_budget(slow, "fp32", budget=0.01).chosen == "fp32"
