"""Recommend batching settings from a latency profile, by simulation.

Candidates are every max batch size in 1, 2, 4, ... up to the limit crossed with a ladder of
timeouts (instances and the eager threshold stay as given). With an expected arrival rate, a
candidate is feasible when the simulated queue keeps up and its p99 is within the budget; among
those the one with the highest capacity (instances * max_b b / (latency(b) + the profile's
hand-back time per batch), the headroom for bursts) wins, ties going to the lower p99. Without a
rate ("max throughput"), each candidate's highest Poisson rate whose p99 stays within the budget
is found by bisection, and the highest wins.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from core.batching.profile import LatencyProfile, default_batch_sizes
from core.batching.results import LoadResult
from core.batching.settings import BatchingSettings
from core.batching.simulate import simulate
from core.errors import InvalidSpec

DEFAULT_TIMEOUTS_MS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
BISECTION_STEPS = 7


class Candidate(BaseModel):
    """One simulated setting: its rate, prediction and whether it meets the budget."""

    model_config = ConfigDict(extra="forbid")

    max_batch_size: int
    timeout_ms: float
    rate: float
    capacity: float = Field(description="Highest throughput these settings can reach (req/s).")
    predicted: LoadResult
    feasible: bool


class Recommendation(BaseModel):
    """The chosen settings, their prediction, why, and every candidate tried."""

    model_config = ConfigDict(extra="forbid")

    settings: BatchingSettings
    predicted: LoadResult
    feasible: bool
    reason: str
    candidates: list[Candidate]


def recommend(
    profile: LatencyProfile,
    *,
    p99_budget_ms: float,
    rate: float | None = None,
    base: BatchingSettings | None = None,
    max_batch_size: int = 32,
    timeouts_ms: tuple[float, ...] = DEFAULT_TIMEOUTS_MS,
    requests: int = 4000,
    seed: int = 0,
) -> Recommendation:
    """Search max batch size x timeout under a p99 budget (see the module docstring)."""
    if p99_budget_ms <= 0 or (rate is not None and rate <= 0):
        raise InvalidSpec("The p99 budget and the arrival rate must be positive.")
    base = base or BatchingSettings()
    grid = [
        base.model_copy(update={"max_batch_size": b, "timeout_ms": t, "preferred_batch_sizes": []})
        for b in default_batch_sizes(max_batch_size)
        for t in timeouts_ms
    ]
    candidates = [
        _at_rate(profile, s, rate, p99_budget_ms, requests, seed)
        if rate is not None
        else _best_rate(profile, s, p99_budget_ms, requests, seed)
        for s in grid
    ]
    return _choose(candidates, grid, rate, p99_budget_ms)


def _capacity(profile: LatencyProfile, settings: BatchingSettings) -> float:
    return profile.ceiling(settings.max_batch_size, with_handoff=True)[0] * settings.instances


def _at_rate(
    profile: LatencyProfile,
    settings: BatchingSettings,
    rate: float,
    budget: float,
    requests: int,
    seed: int,
) -> Candidate:
    predicted = simulate(profile, settings, rate=rate, requests=requests, seed=seed)
    return Candidate(
        max_batch_size=settings.max_batch_size,
        timeout_ms=settings.timeout_ms,
        rate=rate,
        capacity=_capacity(profile, settings),
        predicted=predicted,
        feasible=not predicted.saturated and predicted.p99_ms <= budget,
    )


def _best_rate(
    profile: LatencyProfile, settings: BatchingSettings, budget: float, requests: int, seed: int
) -> Candidate:
    capacity = _capacity(profile, settings)
    low, high = 0.0, capacity
    best = _at_rate(profile, settings, capacity * 0.05, budget, requests, seed)
    for _ in range(BISECTION_STEPS):
        middle = (low + high) / 2
        trial = _at_rate(profile, settings, middle, budget, requests, seed)
        if trial.feasible:
            low, best = middle, trial
        else:
            high = middle
    return best


def _choose(
    candidates: list[Candidate], grid: list[BatchingSettings], rate: float | None, budget: float
) -> Recommendation:
    feasible = [i for i, c in enumerate(candidates) if c.feasible]
    if rate is None:
        pool = feasible or range(len(candidates))
        pick = max(
            pool,
            key=lambda i: (candidates[i].predicted.throughput, -candidates[i].predicted.p99_ms),
        )
    elif feasible:
        pick = max(
            feasible, key=lambda i: (candidates[i].capacity, -candidates[i].predicted.p99_ms)
        )
    else:
        pick = min(range(len(candidates)), key=lambda i: candidates[i].predicted.p99_ms)
    chosen = candidates[pick]
    return Recommendation(
        settings=grid[pick],
        predicted=chosen.predicted,
        feasible=chosen.feasible,
        reason=_reason(chosen, len(feasible), len(candidates), rate, budget),
        candidates=candidates,
    )


def _reason(chosen: Candidate, feasible: int, total: int, rate: float | None, budget: float) -> str:
    setting = f"max batch {chosen.max_batch_size}, timeout {chosen.timeout_ms:g} ms"
    p99 = chosen.predicted.p99_ms
    if not chosen.feasible:
        load = f"{rate:g} req/s" if rate is not None else "any rate tried"
        return (
            f"No setting of {total} tried keeps p99 within {budget:g} ms at {load}; the "
            f"lowest p99 is {p99:.1f} ms ({setting}). Add instances, lower the rate, or raise "
            "the budget."
        )
    if rate is None:
        return (
            f"{setting} sustains the most: {chosen.predicted.throughput:.0f} req/s with p99 "
            f"{p99:.1f} ms <= {budget:g} ms ({feasible} of {total} settings meet the budget)."
        )
    return (
        f"{feasible} of {total} settings keep up with {rate:g} req/s within p99 {budget:g} ms; "
        f"{setting} has the most headroom (up to {chosen.capacity:.0f} req/s) at p99 {p99:.1f} ms."
    )
