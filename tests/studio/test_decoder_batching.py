"""The Batching page's decoder what-if from a stored decode profile: closed forms of the serving
what-if (optistudio.core.llm.serving_whatif), the rate sweep of both policies, and its chart."""

from __future__ import annotations

import pytest
from decoder_models import build_tiny_decoder

from optistudio.core.llm.batched_serving import ServingPolicy
from optistudio.core.llm.serving_whatif import DecodeProfile
from optistudio.studio import decoder_batching as decoder
from optistudio.studio.decoder_batching_figures import (
    RATE_AXIS,
    TOKENS_AXIS,
    TPOT_AXIS,
    decode_profile_figure,
    decoder_sweep_figure,
)

# step(b) = 2 + b ms (b = 1, 2, 4); prefill(P) = 1 + P / 10 ms; the mean is every step's time
PROFILE = DecodeProfile(
    batch_sizes=[1, 2, 4], step_ms=[3.0, 4.0, 6.0], prompt_lengths=[10, 110], prefill_ms=[2, 12]
)
CEILING = 10 / (3.0 + 9 * 6.0 / 4) * 1000  # N / (prefill(20) + (N - 1) step(4) / 4), tokens/s


def load(rate: float, batching: str = "continuous") -> decoder.DecoderLoad:
    policy = ServingPolicy(batching=batching, max_batch=4)  # type: ignore[arg-type]
    return decoder.DecoderLoad(rate=rate, policy=policy, prompt_tokens=20, new_tokens=10)


@pytest.mark.parametrize("batching", ["continuous", "static"])
def test_a_request_alone_costs_its_prefill_then_a_step_per_token(batching: str) -> None:
    whatif = decoder.predict(PROFILE, load(0.01, batching))  # 100 s apart: nobody overlaps

    figures = decoder.headline(whatif)

    assert figures["TTFT p50 (ms)"] == pytest.approx(3.0)  # prefill(20)
    assert figures["Time per token p50 (ms)"] == pytest.approx(3.0)  # step(1)
    assert figures["Time per token p99 (ms)"] == pytest.approx(3.0)
    assert figures["Mean batch"] == pytest.approx(1.0)
    assert figures["Continuous ceiling (tokens/s)"] == pytest.approx(CEILING)
    assert decoder.saturation_line(whatif) is None


def test_the_first_rate_is_a_share_of_what_the_ceiling_serves() -> None:
    assert decoder.ceiling_rate(PROFILE, load(1.0)) == pytest.approx(CEILING / 10)
    assert decoder.first_rate(PROFILE, load(1.0)) == pytest.approx(0.6 * CEILING / 10, rel=1e-2)


def test_arrivals_past_the_ceiling_keep_the_queue_growing_and_say_so() -> None:
    whatif = decoder.predict(PROFILE, load(1.5 * CEILING / 10))

    line = decoder.saturation_line(whatif)

    assert whatif.predicted.saturated and line is not None
    assert f"{CEILING / 10:.3g} requests/s" in line and "max batch 4" in line
    assert whatif.predicted.tokens_per_s <= CEILING * 1.01  # the server's speed, no more


def test_the_sweep_holds_both_policies_under_the_ceiling() -> None:
    frame = decoder.rate_sweep(PROFILE, load(1.0))

    assert list(frame["batching"].unique()) == ["static", "continuous"]
    assert len(frame) == 2 * len(decoder.SWEEP_SHARES)
    assert (frame["tokens_per_s"] <= CEILING * 1.01).all()
    static, continuous = (
        frame[frame["batching"] == b].reset_index() for b in ("static", "continuous")
    )
    assert (static["rate"] == continuous["rate"]).all()
    assert continuous["saturated"].iloc[-1] and not continuous["saturated"].iloc[0]
    # below the ceiling a continuous server admits a request at the next step; a static one
    # makes it wait for the whole batch before it to end
    below = ~(static["saturated"] | continuous["saturated"])
    assert below.sum() >= len(decoder.SWEEP_SHARES) // 2
    assert (continuous["ttft_p99_ms"][below] < static["ttft_p99_ms"][below]).all()


def test_the_sweep_chart_names_its_axes_with_units_and_marks_the_rate() -> None:
    frame = decoder.rate_sweep(PROFILE, load(1.0), requests=60)

    figure = decoder_sweep_figure(frame, 30.0, CEILING)

    names = [trace.name for trace in figure.data]
    assert names == [
        "static: tokens/s",
        "static: p99 time per token (ms)",
        "continuous: tokens/s",
        "continuous: p99 time per token (ms)",
    ]
    layout = figure.layout
    assert layout.xaxis.title.text == RATE_AXIS and "(requests/s)" in RATE_AXIS
    assert layout.yaxis.title.text == TOKENS_AXIS and layout.yaxis2.title.text == TPOT_AXIS
    assert [shape.x0 for shape in layout.shapes if shape.type == "line" and shape.x0 == 30.0]
    assert [shape.y0 for shape in layout.shapes if shape.y0 == pytest.approx(CEILING)]
    saturated = frame["saturated"].tolist()
    symbols = [*figure.data[0].marker.symbol, *figure.data[2].marker.symbol]
    assert symbols == ["x" if s else "circle" for s in saturated]


def test_the_profile_reads_per_batch_size() -> None:
    rows = decoder.profile_rows(PROFILE)

    assert rows["batch"].tolist() == [1, 2, 4]
    assert rows["tokens/s"].tolist() == pytest.approx([1000 / 3, 500, 4000 / 6])
    assert rows["ms per step p50"].isna().all()  # this profile kept no single steps
    assert decode_profile_figure(PROFILE).layout.xaxis.title.text == "live rows per step"


def test_defaults_fit_the_context_of_the_card(tmp_path) -> None:  # type: ignore[no-untyped-def]
    card = decoder.decoder_card(build_tiny_decoder(tmp_path / "decoder"))

    assert card is not None and card.context_length == 128
    assert decoder.default_lengths(card) == (32, 64)
    assert decoder.default_lengths(card.model_copy(update={"context_length": 64})) == (16, 32)
    assert decoder.context_problem(card, 32, 64) is None
    problem = decoder.context_problem(card, 100, 64)
    assert problem is not None and "needs 164 tokens of context" in problem
    assert decoder.decoder_card(None) is None


def test_a_one_shot_model_has_no_decoder_card(tiny_model) -> None:  # type: ignore[no-untyped-def]
    assert decoder.decoder_card(tiny_model) is None
