"""The decoder serving what-if against closed forms, a runner of known cost, and a real run."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from decoder_models import TinyShape, build_tiny_decoder

from optistudio.core.backends.base import SessionOptions
from optistudio.core.llm import open_decoder
from optistudio.core.llm.batched_serving import (
    DecodeRequest,
    ServingPolicy,
    WallClock,
    arrival_trace,
    run_policy,
    serve,
    serving_figures,
)
from optistudio.core.llm.serving_whatif import (
    DecodeProfile,
    continuous_ceiling,
    measure_decode_profile,
    predict_serving,
    what_if,
)

# step(b) = 2 + b ms (b = 1, 2, 4; 2 ms more per extra row past 4); prefill(P) = 1 + P / 10 ms
PROFILE = DecodeProfile(
    batch_sizes=[1, 2, 4], step_ms=[3.0, 4.0, 6.0], prompt_lengths=[10, 110], prefill_ms=[2, 12]
)
CONTINUOUS = ServingPolicy(batching="continuous", max_batch=4)
STATIC = ServingPolicy(batching="static", max_batch=4)


def _together(count: int, prompt: int, new: int) -> list[DecodeRequest]:
    return [DecodeRequest(arrival_s=0.0, prompt_tokens=prompt, new_tokens=new)] * count


def test_the_profile_interpolates_and_extends_along_the_last_slope() -> None:
    assert PROFILE.step_latency_ms(3) == pytest.approx(5.0)
    assert PROFILE.step_latency_ms(8) == pytest.approx(10.0)
    assert PROFILE.prefill_latency_ms(20) == pytest.approx(3.0)
    assert PROFILE.prefill_latency_ms(4) == pytest.approx(2.0)  # never below the shortest's
    assert PROFILE.tokens_per_s(4) == pytest.approx(4000 / 6)


@pytest.mark.parametrize("policy", [CONTINUOUS, STATIC], ids=["continuous", "static"])
def test_a_request_alone_takes_its_prefill_then_one_step_per_token(policy: ServingPolicy) -> None:
    figures = predict_serving(PROFILE, _together(1, 20, 10), policy, service="mean", warmup_share=0)

    assert figures.ttft_p50_ms == pytest.approx(3.0)
    assert figures.tpot_p50_ms == pytest.approx(3.0) and figures.tpot_p99_ms == pytest.approx(3.0)
    assert figures.tokens_per_s == pytest.approx(10 / 0.030)


def test_static_batches_run_to_their_end_before_the_next() -> None:
    run_figures = predict_serving(
        PROFILE, _together(8, 20, 5), STATIC, service="mean", warmup_share=0
    )

    # each batch: 4 prefills of 3 ms, then 4 steps of 6 ms with 4 rows: 36 ms; two of them
    assert run_figures.tokens_per_s == pytest.approx(8 * 5 / 0.072)
    assert run_figures.mean_batch == pytest.approx(4.0)
    assert run_figures.ttft_p50_ms == pytest.approx((12 + 39) / 2)  # 3,6,9,12 | 39,42,45,48


def test_a_full_continuous_server_meets_its_closed_form_ceiling() -> None:
    ceiling = continuous_ceiling(PROFILE, 4, 20, 20)
    trace = arrival_trace(rate=2 * ceiling / 20, count=400, prompt_tokens=20, new_tokens=20)

    figures = predict_serving(PROFILE, trace, CONTINUOUS, service="mean")

    assert ceiling == pytest.approx(20 / (0.003 + 19 * 0.006 / 4))
    assert figures.tokens_per_s == pytest.approx(ceiling, rel=0.03)
    assert figures.saturated and figures.mean_batch == pytest.approx(4, rel=0.03)


def test_below_the_ceiling_every_token_asked_for_is_served() -> None:
    report = what_if(PROFILE, CONTINUOUS, rate=5.0, prompt_tokens=20, new_tokens=10, requests=300)

    assert report.offered_tokens_per_s == 50.0
    assert report.predicted.tokens_per_s == pytest.approx(50.0, rel=0.15)
    assert not report.predicted.saturated
    assert report.predicted.tpot_p50_ms == pytest.approx(3.0)  # mostly alone: step(1)


def test_measured_steps_reach_the_tail_and_the_mean_does_not() -> None:
    spread = PROFILE.model_copy(
        update={"step_runs_ms": [[2.0] * 9 + [12.0], [3.0] * 9 + [13.0], [5.0] * 9 + [15.0]]}
    )
    trace = arrival_trace(rate=20.0, count=200, prompt_tokens=20, new_tokens=10)

    mean = predict_serving(spread, trace, CONTINUOUS, service="mean")
    measured = predict_serving(spread, trace, CONTINUOUS, service="measured")

    assert measured.tpot_p99_ms > 2 * mean.tpot_p99_ms
    assert measured.tpot_mean_ms == pytest.approx(mean.tpot_mean_ms, rel=0.15)


class _SleepingRunner:
    """A decoder stand-in of known cost on the wall clock: step(b) and prefill(P) of PROFILE."""

    def __init__(self) -> None:
        self.rows = 0

    def admit(self, index: int, request: DecodeRequest) -> int:
        _sleep_ms(PROFILE.prefill_latency_ms(request.prompt_tokens))
        self.rows += 1
        return 0

    def step(self) -> list[int]:
        _sleep_ms(PROFILE.step_latency_ms(self.rows))
        return [0] * self.rows

    def retire(self, rows: list[int]) -> None:
        self.rows -= len(rows)


def _sleep_ms(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while (left := end - time.perf_counter()) > 0:
        time.sleep(min(left, 0.0005))


@pytest.mark.timing
@pytest.mark.parametrize("policy", [CONTINUOUS, STATIC], ids=["continuous", "static"])
def test_the_loop_on_the_wall_clock_meets_its_prediction(policy: ServingPolicy) -> None:
    trace = arrival_trace(rate=40.0, count=60, prompt_tokens=[10, 30], new_tokens=8, seed=2)

    measured = serving_figures(run_policy(trace, policy, _SleepingRunner(), WallClock()))
    predicted = predict_serving(PROFILE, trace, policy, service="mean")

    # sleeps overshoot by scheduler wake-ups; a loaded machine wakes later still
    assert measured.tokens_per_s == pytest.approx(predicted.tokens_per_s, rel=0.25)
    assert predicted.tpot_p50_ms <= measured.tpot_p50_ms < 2 * predicted.tpot_p50_ms + 1


@pytest.fixture(scope="module")
def small_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    shape = TinyShape(layers=4, hidden=256, heads=8, kv_heads=4, ffn=1024, vocab=512)
    return build_tiny_decoder(tmp_path_factory.mktemp("small") / "fp32", shape)


@pytest.mark.timing
def test_a_real_run_lands_near_its_prediction(small_decoder: Path) -> None:
    session = open_decoder(small_decoder, options=SessionOptions(threads=1))
    profile = measure_decode_profile(
        session, vocab=512, batch_sizes=(1, 2, 4), prompt_lengths=(8, 16, 32), steps=16
    )
    rate = 0.3 * continuous_ceiling(profile, 4, 16, 12) / 12
    trace = arrival_trace(rate=rate, count=60, prompt_tokens=[8, 16, 24], new_tokens=12, seed=1)

    measured = serving_figures(serve(session, trace, CONTINUOUS, vocab=512))
    predicted = predict_serving(profile, trace, CONTINUOUS)

    # at 30 % of the ceiling both serve what arrives, even on a machine that neighbours slow
    # down a few times between the profile and the run; the time per token is the machine's
    # speed of the moment (4x the profile's on a loaded 2-core machine), so it is not held
    assert measured.tokens_per_s == pytest.approx(predicted.tokens_per_s, rel=0.3)
    assert measured.requests == predicted.requests == 54  # after the warm-up's 6
    assert not predicted.saturated and predicted.tpot_p50_ms > 0
