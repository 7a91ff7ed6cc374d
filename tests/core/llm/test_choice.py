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


def test_a_variant_over_budget_is_never_chosen_however_fast() -> None:
    candidates = _candidates(0.08) + [
        DecoderCandidate(name="int4_block128", tokens_per_s=10_000, perplexity_increase=0.051)
    ]

    choice = fastest_within_budget(candidates, "fp32")

    assert choice.chosen == "int8_weight_only"
    assert "over the 5% budget" in choice.reasons["int4_block128"]


def test_a_variant_not_significantly_faster_is_not_chosen() -> None:
    candidates = [
        DecoderCandidate(name="fp32", tokens_per_s=50, perplexity_increase=0.0),
        DecoderCandidate(
            name="int4_weight_only", tokens_per_s=52, perplexity_increase=0.01, faster=False
        ),
    ]

    choice = fastest_within_budget(candidates, "fp32")

    assert choice.chosen == "fp32"
    assert "not significantly faster" in choice.reasons["int4_weight_only"]


def test_another_limit_missed_keeps_a_variant_out() -> None:
    candidates = _candidates(0.01)
    candidates[2] = candidates[2].model_copy(update={"missed": "top1_agreement 85% < 90%"})

    choice = fastest_within_budget(candidates, "fp32")

    assert choice.chosen == "int8_weight_only"
    assert "top1_agreement 85% < 90%" in choice.reasons["int4_weight_only"]


@pytest.mark.parametrize(
    ("rank_by", "chosen"),
    [("tokens_per_s", "int4_weight_only"), ("ttft", "int8_weight_only"), ("throughput", "fp32")],
    ids=["decode-speed", "time-to-first-token", "throughput-at-batch-n"],
)
def test_the_rank_on_request(rank_by: str, chosen: str) -> None:
    figures = {  # tokens/s at batch 1, TTFT ms, tokens/s at batch N
        "fp32": (50, 40.0, 400.0),
        "int8_weight_only": (80, 30.0, 300.0),
        "int4_weight_only": (120, 35.0, 200.0),
    }
    candidates = [
        DecoderCandidate(
            name=name, tokens_per_s=tps, ttft_ms=ttft, throughput=thr, perplexity_increase=0.0
        )
        for name, (tps, ttft, thr) in figures.items()
    ]

    choice = fastest_within_budget(candidates, "fp32", rank_by=rank_by)  # type: ignore[arg-type]

    assert choice.chosen == chosen
