"""What-if for serving a decoder: tokens/s and time per token at an arrival rate, predicted.

The decoder's costs are measured once (`measure_decode_profile`): the time of one decoding step
with b live rows, b = 1..N (each step timed, through the same BatchedDecoder the server uses,
after a prompt of `step_prompt_tokens` per row), and the time to admit one request, its prefill
at batch 1, per prompt length. Between measured points both are linear; past the last they go on along the last
segment's slope (never falling); below the shortest prompt a prefill costs the shortest's.

A prediction runs the serving loop itself (optistudio.core.llm.batched_serving.run_policy, the
policy's own code) on a simulated clock: an admission advances it by prefill(P), a step with b
rows by step(b), and an idle server jumps to the next arrival or timeout. That is a
discrete-event simulation whose events are the loop's pieces of work. service="mean" takes the
mean step time; service="measured" (default) draws each step from the steps timed at the nearest
measured batch size, scaled by the ratio of the means (the tail of the time per token is the
steps' own spread plus the prefills that come between two steps).

Closed forms the tests hold it to: a request served alone has TTFT = prefill(P) and every gap
step(1); a static batch of B equal requests arriving together ends after B prefill(P) +
(N - 1) step(B); a continuous server kept full serves N / (prefill(P) + (N - 1) step(B) / B)
tokens per second (`continuous_ceiling`: each request costs its prefill and 1/B of N - 1 steps).

Not modelled: a step's growth with the cache length (measured at one context; attention over
a few hundred tokens is small beside the weights a small model reads each step), the copy of
the batch's cache when a request joins a live batch (the profile's prefills join an empty one),
and a machine whose speed changes between the profile and the run (neighbours' load: a
prediction holds only as well as the machine's speed does).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends.base import SessionOptions
from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.batched_decode import BatchedDecoder
from optistudio.core.llm.batched_serving import (
    DecodeRequest,
    ServingFigures,
    ServingPolicy,
    arrival_trace,
    run_policy,
    serve,
    serving_figures,
)
from optistudio.core.llm.card import DecoderCard, read_card
from optistudio.core.llm.decode import DecoderSession, open_decoder
from optistudio.core.llm.timing import DecodeTiming, prompt_ids
from optistudio.core.machine.environment import fingerprint

Service = Literal["mean", "measured"]


class DecodeProfile(BaseModel):
    """Measured cost of a decoding step per batch size and of a prefill per prompt length."""

    model_config = ConfigDict(extra="forbid")

    batch_sizes: list[int] = Field(min_length=1, description="Rows per step measured, ascending.")
    step_ms: list[float] = Field(description="Mean milliseconds of one step at each batch size.")
    step_runs_ms: list[list[float]] = Field(
        default_factory=list, description="Every timed step at each batch size, in order."
    )
    prompt_lengths: list[int] = Field(min_length=1, description="Prompt tokens measured.")
    prefill_ms: list[float] = Field(description="Median ms to admit one prompt of each length.")
    step_prompt_tokens: int = Field(
        default=0,
        description="Prompt tokens per row before the timed steps (the cache grows from there "
        "by one token a step).",
    )
    backend: str = ""
    threads: int | None = None

    def step_latency_ms(self, rows: int) -> float:
        """Milliseconds of one step with `rows` live rows."""
        return _linear(rows, self.batch_sizes, self.step_ms)

    def prefill_latency_ms(self, tokens: int) -> float:
        """Milliseconds to admit one prompt of `tokens` tokens."""
        return _linear(tokens, self.prompt_lengths, self.prefill_ms)

    def tokens_per_s(self, rows: int) -> float:
        """Decoding speed of a full batch of `rows`, prefills aside: rows / step(rows)."""
        return rows * 1000 / self.step_latency_ms(rows)

    def decode_timings(self) -> list[DecodeTiming]:
        """Per measured batch size: tokens/s and ms per token p50 / p99 of the timed steps."""
        return [
            DecodeTiming(
                batch=size,
                prompt_tokens=self.step_prompt_tokens,
                steps=len(runs),
                tokens_per_s=size * 1000 * len(runs) / float(np.sum(runs)),
                ms_per_token_p50=float(np.percentile(runs, 50)),
                ms_per_token_p99=float(np.percentile(runs, 99)),
            )
            for size, runs in zip(self.batch_sizes, self.step_runs_ms, strict=True)
        ]


def _linear(x: float, xs: Sequence[int], ys: Sequence[float]) -> float:
    if len(xs) == 1 or x <= xs[-1]:
        return float(np.interp(x, xs, ys))
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return float(ys[-1] + max(slope, 0.0) * (x - xs[-1]))


def measure_decode_profile(
    session: DecoderSession,
    *,
    vocab: int,
    batch_sizes: Sequence[int] = (1, 2, 4, 8),
    prompt_lengths: Sequence[int] = (8, 32, 128),
    steps: int = 32,
    context: int = 16,
    repeats: int = 5,
    warmup_steps: int = 3,
    backend: str = "",
    threads: int | None = None,
) -> DecodeProfile:
    """Time `steps` steps at each batch size after a `context`-token prompt per row, and
    `repeats` prefills of one prompt at each length (after a warm-up of each). `backend` and
    `threads` are recorded with it (what the session was loaded with)."""
    runs = [_time_steps(session, vocab, b, steps, context, warmup_steps) for b in batch_sizes]
    prefills = [_time_prefill(session, vocab, p, repeats) for p in prompt_lengths]
    return DecodeProfile(
        batch_sizes=list(batch_sizes),
        step_ms=[float(np.mean(r)) for r in runs],
        step_runs_ms=runs,
        prompt_lengths=list(prompt_lengths),
        prefill_ms=prefills,
        step_prompt_tokens=context,
        backend=backend,
        threads=threads,
    )


def _time_steps(
    session: DecoderSession, vocab: int, rows: int, steps: int, context: int, warmup: int
) -> list[float]:
    batch = BatchedDecoder(session)
    batch.admit(list(prompt_ids(rows, context, vocab)))
    for _ in range(warmup):
        batch.step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        batch.step()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def _time_prefill(session: DecoderSession, vocab: int, tokens: int, repeats: int) -> float:
    prompt = prompt_ids(1, tokens, vocab)[0]
    BatchedDecoder(session).admit([prompt])
    times = []
    for _ in range(repeats):
        batch = BatchedDecoder(session)
        start = time.perf_counter()
        batch.admit([prompt])
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


class SimulatedClock:
    """A clock that only the simulated work moves."""

    def __init__(self) -> None:
        self.time = 0.0

    def now(self) -> float:
        return self.time

    def wait_until(self, when: float) -> None:
        self.time = max(self.time, when)


class ProfileEngine:
    """The server's work at the profile's costs: it moves the clock, computes no tokens."""

    def __init__(
        self, profile: DecodeProfile, clock: SimulatedClock, service: Service, seed: int
    ) -> None:
        self.profile, self.clock, self.service = profile, clock, service
        self.rng = np.random.default_rng(seed)
        self.rows = 0

    def admit(self, index: int, request: DecodeRequest) -> int:
        self.clock.time += self.profile.prefill_latency_ms(request.prompt_tokens) / 1000
        self.rows += 1
        return -1

    def step(self) -> list[int]:
        self.clock.time += self._step_ms(self.rows) / 1000
        return [-1] * self.rows

    def retire(self, rows: list[int]) -> None:
        self.rows -= len(rows)

    def _step_ms(self, rows: int) -> float:
        mean = self.profile.step_latency_ms(rows)
        runs = self.profile.step_runs_ms
        if self.service == "mean" or not runs:
            return mean
        sizes = np.asarray(self.profile.batch_sizes)
        nearest = int(np.argmin(np.abs(sizes - rows)))
        drawn = runs[nearest][int(self.rng.integers(len(runs[nearest])))]
        return drawn * mean / self.profile.step_ms[nearest]


def predict_serving(
    profile: DecodeProfile,
    requests: Sequence[DecodeRequest],
    policy: ServingPolicy,
    *,
    service: Service = "measured",
    seed: int = 0,
    warmup_share: float = 0.1,
) -> ServingFigures:
    """The figures serving `requests` with `policy` would give, at the profile's costs."""
    clock = SimulatedClock()
    run = run_policy(requests, policy, ProfileEngine(profile, clock, service, seed), clock)
    return serving_figures(run, warmup_share=warmup_share)


class ServingWhatIf(BaseModel):
    """A prediction at one arrival rate, with what it was asked and the server's ceiling."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(description="Requests per second offered.")
    prompt_tokens: int
    new_tokens: int
    requests: int = Field(description="Requests simulated.")
    policy: ServingPolicy
    offered_tokens_per_s: float = Field(description="rate x new tokens: what arrivals ask for.")
    ceiling_tokens_per_s: float = Field(
        description="Continuous batching kept full (the closed form); static serves less."
    )
    predicted: ServingFigures


def what_if(
    profile: DecodeProfile,
    policy: ServingPolicy,
    *,
    rate: float,
    prompt_tokens: int,
    new_tokens: int,
    requests: int = 500,
    seed: int = 0,
) -> ServingWhatIf:
    """Predict serving Poisson arrivals at `rate` of requests of these lengths."""
    trace = arrival_trace(
        rate=rate, count=requests, prompt_tokens=prompt_tokens, new_tokens=new_tokens, seed=seed
    )
    return ServingWhatIf(
        rate=rate,
        prompt_tokens=prompt_tokens,
        new_tokens=new_tokens,
        requests=requests,
        policy=policy,
        offered_tokens_per_s=rate * new_tokens,
        ceiling_tokens_per_s=continuous_ceiling(
            profile, policy.max_batch, prompt_tokens, new_tokens
        ),
        predicted=predict_serving(profile, trace, policy, seed=seed),
    )


def continuous_ceiling(
    profile: DecodeProfile, max_batch: int, prompt_tokens: int, new_tokens: int
) -> float:
    """Tokens/s of a continuous server whose batch stays full: N / (prefill(P) + (N - 1)
    step(B) / B)."""
    if max_batch < 1 or new_tokens < 1:
        raise InvalidSpec(
            f"A ceiling needs a batch and new tokens >= 1; got {max_batch}, {new_tokens}."
        )
    per_request_ms = (
        profile.prefill_latency_ms(prompt_tokens)
        + (new_tokens - 1) * profile.step_latency_ms(max_batch) / max_batch
    )
    return new_tokens * 1000 / per_request_ms


class ServeWhatIfSettings(BaseModel):
    """What `optistudio llm serve-whatif` asks: a load, a policy, and how much to measure."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(gt=0, description="Requests per second arriving (Poisson).")
    prompt_tokens: int = Field(default=32, ge=1, description="Prompt tokens of each request.")
    new_tokens: int = Field(default=64, ge=1, description="Tokens each request wants.")
    policy: ServingPolicy = Field(default_factory=ServingPolicy)
    requests: int = Field(default=500, ge=1, le=100_000, description="Requests simulated.")
    steps: int = Field(default=32, ge=2, le=1024, description="Timed steps per batch size.")
    verify_requests: int = Field(
        default=0, ge=0, description="Also serve this many requests for real (0: none)."
    )


class VerifiedServing(BaseModel):
    """A real run and the prediction for the same arrivals and lengths."""

    model_config = ConfigDict(extra="forbid")

    measured: ServingFigures
    predicted: ServingFigures


class DecoderServingReport(BaseModel):
    """The measured profile, the prediction from it, and a real run when one was asked for."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    profile: DecodeProfile
    decode: list[DecodeTiming] = Field(description="The profile's steps per batch size.")
    whatif: ServingWhatIf
    verified: VerifiedServing | None = Field(
        description="verify_requests of the load served for real, beside the prediction for "
        "those very arrivals; None when not asked."
    )
    environment: dict[str, object]


def decoder_serving_report(
    path: Path,
    settings: ServeWhatIfSettings,
    *,
    backend: str = "onnxruntime",
    options: SessionOptions | None = None,
    card: DecoderCard | None = None,
) -> DecoderServingReport:
    """Profile the decoder at `path` at batch sizes up to the policy's, predict the load, and
    serve it for real when `settings.verify_requests` says so."""
    card = card or read_card(path)
    _check_context(card, settings)
    options = options or SessionOptions()
    session = open_decoder(path, backend=backend, options=options, io=card.io)
    vocab = card.vocab or 2
    try:
        profile = measure_decode_profile(
            session,
            vocab=vocab,
            batch_sizes=_batch_sizes(settings.policy.max_batch),
            prompt_lengths=sorted({max(1, settings.prompt_tokens // 4), settings.prompt_tokens}),
            steps=settings.steps,
            context=settings.prompt_tokens,
            backend=backend,
            threads=options.threads,
        )
        verified = _verify(session, profile, settings, vocab) if settings.verify_requests else None
    finally:
        session.close()
    return DecoderServingReport(
        backend=backend,
        profile=profile,
        decode=profile.decode_timings(),
        whatif=what_if(
            profile,
            settings.policy,
            rate=settings.rate,
            prompt_tokens=settings.prompt_tokens,
            new_tokens=settings.new_tokens,
            requests=settings.requests,
        ),
        verified=verified,
        environment=fingerprint(threads=options.threads, extra={"backend": backend}),
    )


def _batch_sizes(largest: int) -> list[int]:
    """1, 2, 4, ... below `largest`, and `largest`."""
    sizes = [1 << k for k in range(largest.bit_length()) if 1 << k < largest]
    return [*sizes, largest]


def _verify(
    session: DecoderSession, profile: DecodeProfile, settings: ServeWhatIfSettings, vocab: int
) -> VerifiedServing:
    trace = arrival_trace(
        rate=settings.rate,
        count=settings.verify_requests,
        prompt_tokens=settings.prompt_tokens,
        new_tokens=settings.new_tokens,
        seed=1,
    )
    return VerifiedServing(
        measured=serving_figures(serve(session, trace, settings.policy, vocab=vocab)),
        predicted=predict_serving(profile, trace, settings.policy),
    )


def _check_context(card: DecoderCard, settings: ServeWhatIfSettings) -> None:
    longest = settings.prompt_tokens + max(settings.new_tokens, settings.steps + 4)
    if card.context_length is not None and longest > card.context_length:
        raise InvalidSpec(
            f"Serving {settings.prompt_tokens}-token prompts with {settings.new_tokens} new "
            f"tokens (and {settings.steps} timed steps) needs {longest} tokens of context but "
            f"the model holds {card.context_length}.",
            hint="Use shorter prompts, fewer new tokens or fewer --steps.",
        )
