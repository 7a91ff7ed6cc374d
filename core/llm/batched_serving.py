"""Serving a decoder to requests that arrive over time: static or continuous batching of steps.

A request arrives at `arrival_s` with a prompt of P tokens and wants N new ones. The server
alternates two kinds of work on one decoder, one at a time:
- admission: a waiting request's prefill (batch 1, P tokens), which yields its first token and
  adds its row to the batch (optistudio.core.llm.batched_decode);
- a decoding step: one token for every live row; a row that has its N tokens leaves the batch.

The policy decides when to admit:
- static: a batch is formed only when none is live, of up to `max_batch` waiting requests, once
  `max_batch` wait, the oldest has waited `timeout_ms`, or no more will arrive; it then decodes
  until its last row finishes (finished rows leave it; nobody joins);
- continuous (in-flight): before every step, waiting requests fill the free places up to
  `max_batch`, so a finished sequence's place is taken at the next step.

The same loop runs on the real decoder with the wall clock (`serve`) and on a model of its
timings with a simulated clock (optistudio.core.llm.serving_whatif): the policy's decisions are
the same code in both, only the cost of each piece of work differs.

Figures (`serving_figures`), over the requests after the first `warmup_share` (by arrival):
- TTFT = first token time - arrival (queue wait + its prefill, and any admission before it);
- time per token (TPOT) = the gap between consecutive tokens of one request (a step, plus the
  prefills of requests admitted between two steps), p50 / p99 over all gaps;
- tokens_per_s = tokens of any request between the window's first arrival and its last
  token / that time (what the server turned out then: a request of the warm-up served inside
  the window counts, so a saturated server shows its full speed);
- saturated: the queue kept growing, i.e. the last quarter of requests waited to be admitted
  more than twice as long as the first half did, and longer than 5 % of the arrival span.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.batched_decode import BatchedDecoder
from optistudio.core.llm.decode import DecoderSession
from optistudio.core.llm.timing import prompt_ids


class ServingPolicy(BaseModel):
    """How decode steps of concurrent requests are batched."""

    model_config = ConfigDict(extra="forbid")

    batching: Literal["static", "continuous"] = Field(
        default="continuous",
        description="static: a batch decodes to its end before the next is formed; continuous: "
        "a finished sequence's place is refilled at the next step.",
    )
    max_batch: int = Field(default=4, ge=1, le=256, description="Most sequences in one step.")
    timeout_ms: float = Field(
        default=0.0, ge=0, description="static: how long the oldest request waits for a full batch."
    )


@dataclass(frozen=True)
class DecodeRequest:
    arrival_s: float
    prompt_tokens: int
    new_tokens: int
    prompt: np.ndarray | None = None
    """The prompt's ids [P] for a real run; None: fixed ids are made (speed does not depend on
    what the tokens say)."""


@dataclass
class ServedRequest:
    arrival_s: float
    admitted_s: float = float("nan")
    token_s: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


@dataclass
class ServedRun:
    requests: list[ServedRequest]
    step_rows: list[int]
    """Rows of each decoding step, in order."""


class Clock(Protocol):
    def now(self) -> float: ...

    def wait_until(self, when: float) -> None: ...


class Engine(Protocol):
    def admit(self, index: int, request: DecodeRequest) -> int:
        """Prefill the request as a new last row; its first token (-1 when not computed)."""
        ...

    def step(self) -> list[int]:
        """One token for every row."""
        ...

    def retire(self, rows: list[int]) -> None: ...


def run_policy(
    requests: Sequence[DecodeRequest], policy: ServingPolicy, engine: Engine, clock: Clock
) -> ServedRun:
    """Serve `requests` with `policy` on `engine`, reading the time from `clock`."""
    _check(requests)
    served = [ServedRequest(arrival_s=r.arrival_s) for r in requests]
    pending = deque(sorted(range(len(requests)), key=lambda i: requests[i].arrival_s))
    queue: deque[int] = deque()
    live: list[int] = []
    step_rows: list[int] = []
    while pending or queue or live:
        while pending and requests[pending[0]].arrival_s <= clock.now():
            queue.append(pending.popleft())
        admit = _admissible(policy, requests, queue, live, clock.now(), bool(pending))
        if not admit and not live:
            clock.wait_until(_next_event(policy, requests, queue, pending))
            continue
        for index in admit:
            queue.remove(index)
            served[index].admitted_s = clock.now()
            token = engine.admit(index, requests[index])
            _emit(served[index], token, clock.now())
            live.append(index)
            live = _retire(live, requests, served, engine)
        if live:
            step_rows.append(len(live))
            tokens, when = engine.step(), clock.now()
            for row, index in enumerate(live):
                _emit(served[index], tokens[row], when)
            live = _retire(live, requests, served, engine)
    return ServedRun(requests=served, step_rows=step_rows)


def _check(requests: Sequence[DecodeRequest]) -> None:
    bad = [r for r in requests if r.prompt_tokens < 1 or r.new_tokens < 1 or r.arrival_s < 0]
    if not requests or bad:
        raise InvalidSpec(
            "Serving needs at least one request, each with a prompt of at least one token, at "
            f"least one new token and an arrival time >= 0; got {len(requests)} requests, "
            f"{len(bad)} of them not so."
        )


def _admissible(
    policy: ServingPolicy,
    requests: Sequence[DecodeRequest],
    queue: deque[int],
    live: list[int],
    now: float,
    more_coming: bool,
) -> list[int]:
    """The waiting requests to admit now, oldest first."""
    if policy.batching == "continuous":
        return list(queue)[: policy.max_batch - len(live)]
    if live or not queue:
        return []
    due = requests[queue[0]].arrival_s + policy.timeout_ms / 1000
    if len(queue) >= policy.max_batch or not more_coming or now >= due - 1e-12:
        return list(queue)[: policy.max_batch]
    return []


def _next_event(
    policy: ServingPolicy,
    requests: Sequence[DecodeRequest],
    queue: deque[int],
    pending: deque[int],
) -> float:
    """When an idle server has something to decide: the next arrival, or a batch's timeout."""
    times = [requests[pending[0]].arrival_s] if pending else []
    if queue:
        times.append(requests[queue[0]].arrival_s + policy.timeout_ms / 1000)
    return min(times)


def _emit(request: ServedRequest, token: int, when: float) -> None:
    request.tokens.append(int(token))
    request.token_s.append(when)


def _retire(
    live: list[int],
    requests: Sequence[DecodeRequest],
    served: list[ServedRequest],
    engine: Engine,
) -> list[int]:
    done = [row for row, i in enumerate(live) if len(served[i].tokens) >= requests[i].new_tokens]
    if done:
        engine.retire(done)
    return [i for row, i in enumerate(live) if row not in done]


class WallClock:
    """Seconds since it was made; waiting sleeps."""

    def __init__(self) -> None:
        self.origin = time.perf_counter()

    def now(self) -> float:
        return time.perf_counter() - self.origin

    def wait_until(self, when: float) -> None:
        time.sleep(max(0.0, when - self.now()))


class DecoderEngine:
    """The real work: prefill and steps of a BatchedDecoder."""

    def __init__(self, session: DecoderSession, vocab: int) -> None:
        self.batch = BatchedDecoder(session)
        self.vocab = vocab

    def admit(self, index: int, request: DecodeRequest) -> int:
        prompt = request.prompt
        if prompt is None:
            prompt = prompt_ids(1, request.prompt_tokens, self.vocab, seed=index)[0]
        return int(self.batch.admit([prompt])[0])

    def step(self) -> list[int]:
        return [int(t) for t in self.batch.step()]

    def retire(self, rows: list[int]) -> None:
        self.batch.retire(rows)


def serve(
    session: DecoderSession,
    requests: Sequence[DecodeRequest],
    policy: ServingPolicy,
    *,
    vocab: int,
) -> ServedRun:
    """Serve `requests` on the decoder for real, arrivals on the wall clock from now."""
    return run_policy(requests, policy, DecoderEngine(session, vocab), WallClock())


class ServingFigures(BaseModel):
    """What a served (or simulated) run gave."""

    model_config = ConfigDict(extra="forbid")

    tokens_per_s: float = Field(description="Tokens of all requests per second, together.")
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float = Field(description="Time per output token: gap between two tokens.")
    tpot_p99_ms: float
    tpot_mean_ms: float
    mean_queue_ms: float = Field(description="Mean wait from arrival to admission.")
    mean_batch: float = Field(description="Mean rows per decoding step.")
    requests: int = Field(description="Requests after the warm-up share.")
    tokens: int = Field(description="Tokens tokens_per_s counts.")
    realised_rate: float | None = Field(description="Requests per second that arrived.")
    saturated: bool = Field(description="Arrivals outpaced service: the queue kept growing.")


def serving_figures(run: ServedRun, *, warmup_share: float = 0.1) -> ServingFigures:
    """The figures of a run (module docstring), skipping the first `warmup_share` requests."""
    ordered = sorted(run.requests, key=lambda r: r.arrival_s)
    window = ordered[int(len(ordered) * warmup_share) :] or ordered
    ttft = np.array([r.token_s[0] - r.arrival_s for r in window]) * 1e3
    gaps = np.concatenate([np.diff(r.token_s) for r in window]) * 1e3
    gaps = gaps if len(gaps) else np.zeros(1)
    start, end = min(r.arrival_s for r in window), max(r.token_s[-1] for r in window)
    times = np.concatenate([r.token_s for r in ordered])
    tokens = int(((times >= start) & (times <= end)).sum())
    span = end - start
    waits = np.array([r.admitted_s - r.arrival_s for r in ordered])
    arrivals = np.array([r.arrival_s for r in ordered])
    arrival_span = float(arrivals[-1] - arrivals[0])
    return ServingFigures(
        tokens_per_s=tokens / span if span > 0 else 0.0,
        ttft_p50_ms=float(np.percentile(ttft, 50)),
        ttft_p99_ms=float(np.percentile(ttft, 99)),
        tpot_p50_ms=float(np.percentile(gaps, 50)),
        tpot_p99_ms=float(np.percentile(gaps, 99)),
        tpot_mean_ms=float(gaps.mean()),
        mean_queue_ms=float(waits[int(len(ordered) * warmup_share) :].mean() * 1e3),
        mean_batch=float(np.mean(run.step_rows)) if run.step_rows else 0.0,
        requests=len(window),
        tokens=tokens,
        realised_rate=(len(arrivals) - 1) / arrival_span if arrival_span > 0 else None,
        saturated=_queue_grew(waits, arrival_span),
    )


def _queue_grew(waits: np.ndarray, arrival_span: float) -> bool:
    if arrival_span <= 0 or len(waits) < 8:
        return False
    first, last = waits[: len(waits) // 2].mean(), waits[-(len(waits) // 4) :].mean()
    return bool(last > 2 * first and last > 0.05 * arrival_span)


def arrival_trace(
    *,
    rate: float,
    count: int,
    prompt_tokens: int | Sequence[int],
    new_tokens: int | Sequence[int],
    process: Literal["poisson", "constant"] = "poisson",
    seed: int = 0,
) -> list[DecodeRequest]:
    """`count` requests arriving at `rate` per second (Poisson or evenly spaced, the first at
    0); lengths fixed, or drawn uniformly (seeded) from the given choices."""
    if rate <= 0 or count < 1:
        raise InvalidSpec(f"An arrival trace needs a positive rate and count; got {rate}, {count}.")
    rng = np.random.default_rng(seed)
    if process == "constant":
        times = np.arange(count) / rate
    else:
        gaps = rng.exponential(1 / rate, count)
        times = np.cumsum(gaps) - gaps[0]
    prompts = _lengths(prompt_tokens, count, rng)
    outputs = _lengths(new_tokens, count, rng)
    return [
        DecodeRequest(arrival_s=float(t), prompt_tokens=p, new_tokens=n)
        for t, p, n in zip(times, prompts, outputs, strict=True)
    ]


def _lengths(choice: int | Sequence[int], count: int, rng: np.random.Generator) -> list[int]:
    if isinstance(choice, int):
        return [choice] * count
    return [int(x) for x in rng.choice(np.asarray(choice), count)]
