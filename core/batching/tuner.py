"""Recommend batching settings from a latency profile, by simulation.

Candidates are every instance count the profile measured (1, 2, 4, ... up to the cores:
`LatencyProfile.instance_counts`; like Triton Model Analyzer's instance groups) but those whose
sessions' threads fill every core, which leave none for the serving threads (`searched_counts`;
`instances` overrides), crossed with
every max batch size in 1, 2, 4, ... up to the limit and a ladder of timeouts (the eager
threshold stays as given). Each count is simulated at the latencies measured with that many
instances busy at once, so more instances win only where the machine serves more with them. A
model whose batch is fixed at 1 and whose rewrite was refused (`batch_refused`) is swept over
instances alone, at max batch 1 (a timeout has nothing to wait for there). With an expected arrival rate, a
candidate is feasible when the simulated queue keeps up and its p99 is within the budget, both
as profiled and with the model `margin` slower (default 10 %; the runtime's own costs with it,
as a machine that much slower runs them: `LatencyProfile.at_pace`, as the band's paces do,
since the serving threads share the model's cores): served under load the model runs
a few percent off its profiled speed (on a 2-core machine 0.88-1.20x from run to run), and near a
setting's knee that is most of its tail, so a setting that only fits the budget at exactly the
profiled speed would miss it when measured. Among the feasible ones the one with the highest
capacity (instances * max_b b / (latency_N(b) + the profile's hand-back time per batch), the
headroom for bursts) wins, ties going to the lower p99, once the p99 band of a Verify at that
rate (optistudio.core.batching.simulate.simulate_band) stays within the budget too: a point
p99 under the budget is the middle of what Verify runs measure, and half of them land above
it, so the best candidates are checked in turn and one whose band's top (with the model
`margin` slower, as the point check) passes the budget gives way to the next. Without a rate
("max throughput"), each candidate's highest Poisson rate whose point p99 fits the budget
with the model `margin` slower is found by bisection; then the best of those rates are held to
the Verify band in turn (at most BAND_CHECKS settings): where the band's top at that rate
passes the budget, the rate is lowered (BAND_STEPS bisection steps on the band) until it fits,
and the setting that sustains the highest such rate wins. Near a setting's knee the point p99
is still under the budget while a Verify's queue already grows in some draws; the rate a user
is told a setting sustains is one its Verify keeps within the budget, not the knee.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.latency_profile import default_batch_sizes
from optistudio.core.batching.results import LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import VERIFY_SECONDS, simulate, simulate_band
from optistudio.core.errors import InvalidSpec
from optistudio.core.progress import ProgressCallback, ignore_progress, scaled

DEFAULT_TIMEOUTS_MS = (0.0, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
BISECTION_STEPS = 7
BAND_CHECKS = 6
"""Most feasible candidates whose Verify band the tuner checks against the budget, best first."""
BAND_STEPS = 5
"""Bisection steps on the band when a "max throughput" rate is lowered until its band fits."""
GRID_SHARE = 0.4
"""The share of `recommend`'s progress the point search takes; the band checks take the rest
(each band is 40 simulated Verify runs: on the zoo's profiles they took most of the time)."""
DEFAULT_MARGIN = 0.10
"""How much slower than profiled the model may run before a recommended setting's p99 leaves
the budget (the runner ran 0.88-1.20x its profiled speed under load on this project's 2-core
machine, docs/BENCHMARKS.md)."""


class Candidate(BaseModel):
    """One simulated setting: its rate, prediction and whether it meets the budget."""

    model_config = ConfigDict(extra="forbid")

    max_batch_size: int
    timeout_ms: float
    instances: int = Field(default=1, ge=1, description="Model instances (sessions).")
    rate: float
    capacity: float = Field(description="Highest throughput these settings can reach (req/s).")
    predicted: LoadResult
    p99_slower_ms: float | None = Field(
        None,
        description="Predicted p99 with the model `margin` slower (None: not simulated, the "
        "setting already missed as profiled; inf: the queue would not keep up).",
    )
    feasible: bool
    p99_band_high_ms: float | None = Field(
        default=None,
        description="The top of the p99 band a Verify of VERIFY_SECONDS at the rate would land "
        'in ("max throughput": with the model `margin` slower; None: not checked). A setting '
        "whose band's top passes the budget is not feasible.",
    )


class Recommendation(BaseModel):
    """The chosen settings, their prediction, why, and every candidate tried."""

    model_config = ConfigDict(extra="forbid")

    settings: BatchingSettings
    predicted: LoadResult
    p99_slower_ms: float | None = Field(None, description="As Candidate.p99_slower_ms.")
    feasible: bool
    margin: float = Field(description="The model slowdown the budget was required to survive.")
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
    margin: float = DEFAULT_MARGIN,
    instances: Sequence[int] | None = None,
    progress: ProgressCallback | None = None,
) -> Recommendation:
    """Search instances x max batch size x timeout under a p99 budget (see the module
    docstring); `instances` defaults to the counts the profile measured. `progress` hears
    each setting simulated, then each Verify band checked (max throughput: up to a minute
    on 2 cores)."""
    if p99_budget_ms <= 0 or (rate is not None and rate <= 0):
        raise InvalidSpec("The p99 budget and the arrival rate must be positive.")
    if not 0 <= margin < 1:
        raise InvalidSpec(
            f"The speed margin must be a share from 0 to below 1 (0.1 = 10 %), got {margin}."
        )
    report = progress or ignore_progress
    search = _Search(profile, p99_budget_ms, requests, seed, margin)
    base = base or BatchingSettings()
    if profile.batch_refused:
        max_batch_size, timeouts_ms = 1, (0.0,)
    counts, left_out = searched_counts(profile, instances)
    grid = _grid(base, counts, max_batch_size, timeouts_ms)
    candidates = []
    for done, settings in enumerate(grid, 1):
        candidates.append(
            search.at_rate(settings, rate) if rate is not None else search.best_rate(settings)
        )
        report(GRID_SHARE * done / len(grid), f"Simulated {done} of {len(grid)} settings")
    search.progress = scaled(report, GRID_SHARE, 1.0)
    if rate is not None:
        candidates = search.served_within(candidates, grid, rate)
    else:
        candidates = search.held_rates(candidates, grid)
    report(1.0, "Done")
    chosen = _choose(candidates, grid, rate, p99_budget_ms, margin, _advice(left_out))
    notes = _notes(profile, counts, left_out)
    if notes:
        chosen = chosen.model_copy(update={"reason": " ".join([chosen.reason, *notes])})
    return chosen


def _grid(
    base: BatchingSettings, counts: list[int], max_batch_size: int, timeouts: Sequence[float]
) -> list[BatchingSettings]:
    """Every setting searched: `base` at each instance count x max batch size x timeout."""
    return [
        base.model_copy(
            update={
                "instances": n,
                "max_batch_size": b,
                "timeout_ms": t,
                "preferred_batch_sizes": [],
            }
        )
        for n in counts
        for b in default_batch_sizes(max_batch_size)
        for t in timeouts
    ]


def _notes(profile: LatencyProfile, counts: list[int], left_out: str) -> list[str]:
    """What the reason adds after its choice: the batch refused, how each searched count is
    predicted, the counts left out, the costs the predictions leave out and a machine whose
    own pace moved while profiling (the margin may not cover it)."""
    notes = [
        f"Only max batch 1 was tried: {profile.batch_refused}" if profile.batch_refused else "",
        *(profile.instances_note(n) for n in counts),
        left_out,
        profile.unmeasured_note() if profile.unmeasured else "",
        profile.pace_note(),
    ]
    return [note for note in notes if note]


def searched_counts(
    profile: LatencyProfile, instances: Sequence[int] | None = None
) -> tuple[list[int], str]:
    """The instance counts the search tries, and a sentence on those it leaves out ('' none):
    `instances` when given; else the profile's measured counts but those whose sessions'
    threads fill every core the profile ran on. Those leave no core for the serving threads,
    which then take one from a session mid-batch: on 2 cores the zoo's picks of 2 instances
    ran 1.3-2.6x slower per call than profiled and 6 of 10 missed their budget, where the same
    searches kept to one instance held 20 of 20 over two runs (docs/BENCHMARKS.md)."""
    if instances:
        return sorted(set(instances)), ""
    cores = _profiled_cores(profile)
    threads = {row.instances: row.threads for row in profile.instance_latency}
    full = [n for n in threads if cores and n * threads[n] >= cores]
    kept = [n for n in profile.instance_counts() if n not in full]
    if not full:
        return kept, ""
    named = ", ".join(map(str, full))
    return kept, (
        f"{named} instances were not searched: with their intra-op threads they fill the "
        f"{cores} cores the profile ran on and leave none for the serving threads, so served "
        "they run slower than profiled (the What-if predicts them from the profile's served "
        "probes; verify one before choosing it)."
    )


def _profiled_cores(profile: LatencyProfile) -> int | None:
    """How many cores the profile's process could run on (None where it does not say)."""
    affinity = profile.environment.get("affinity")
    if isinstance(affinity, list) and affinity:
        return len(affinity)
    cores = profile.environment.get("logical_cores")
    return cores if isinstance(cores, int) and cores > 0 else None


def capacity(profile: LatencyProfile, settings: BatchingSettings) -> float:
    """Highest throughput the settings can reach (req/s): instances x max_b b / (latency(b) +
    the runtime's costs per batch), at most what the serving machinery passes."""
    return profile.ceiling(
        settings.max_batch_size, with_handoff=True, instances=settings.instances
    )[0]


class _Search:
    def __init__(
        self, profile: LatencyProfile, budget: float, requests: int, seed: int, margin: float
    ) -> None:
        self.profile, self.budget, self.requests, self.seed = profile, budget, requests, seed
        self.slower = profile.at_pace(1 + margin) if margin else None
        self.progress: ProgressCallback = ignore_progress
        self.bands = 0

    def at_rate(self, settings: BatchingSettings, rate: float) -> Candidate:
        predicted = self.simulate(self.profile, settings, rate)
        feasible = not predicted.saturated and predicted.p99_ms <= self.budget
        p99_slower = None
        if feasible and self.slower is not None:
            slower = self.simulate(self.slower, settings, rate)
            p99_slower = float("inf") if slower.saturated else slower.p99_ms
            feasible = p99_slower <= self.budget
        return Candidate(
            max_batch_size=settings.max_batch_size,
            timeout_ms=settings.timeout_ms,
            instances=settings.instances,
            rate=rate,
            capacity=capacity(self.profile, settings),
            predicted=predicted,
            p99_slower_ms=p99_slower,
            feasible=feasible,
        )

    def simulate(
        self, profile: LatencyProfile, settings: BatchingSettings, rate: float
    ) -> LoadResult:
        return simulate(profile, settings, rate=rate, requests=self.requests, seed=self.seed)

    def served_within(
        self, candidates: list[Candidate], grid: list[BatchingSettings], rate: float
    ) -> list[Candidate]:
        """The candidates, the feasible ones checked in the order `_choose` prefers them
        (at most BAND_CHECKS) until one's p99 band for a Verify at `rate`, with the model
        `margin` slower as the point check and "max throughput" take it, stays within the
        budget: those whose band's top passes it are no longer feasible. A point p99 under the
        budget is the middle of what a Verify measures; half of those runs land above it."""
        order = sorted(
            (i for i, c in enumerate(candidates) if c.feasible),
            key=lambda i: (-candidates[i].capacity, candidates[i].predicted.p99_ms),
        )
        checked = list(candidates)
        for i in order[:BAND_CHECKS]:
            top = self.band_top(self.slower or self.profile, grid[i], rate, most=BAND_CHECKS)
            within = top <= self.budget
            update = {"p99_band_high_ms": top, "feasible": within}
            checked[i] = candidates[i].model_copy(update=update)
            if within:
                break
        return checked

    def held_rates(
        self, candidates: list[Candidate], grid: list[BatchingSettings]
    ) -> list[Candidate]:
        """ "Max throughput": the feasible candidates by their point rate, best first (at most
        BAND_CHECKS), each moved to the highest rate whose Verify band stays within the budget;
        one whose point rate cannot beat the best rate held so far ends the search. A candidate
        whose band cannot stay within the budget above that best rate keeps its point rate, the
        band's top there, and is no longer feasible."""
        order = sorted(
            (i for i, c in enumerate(candidates) if c.feasible),
            key=lambda i: (-candidates[i].rate, candidates[i].predicted.p99_ms),
        )
        checked, best = list(candidates), 0.0
        for i in order[:BAND_CHECKS]:
            if candidates[i].rate <= best:
                break
            top = self.slower_top(grid[i], candidates[i].rate)
            held, held_top = (
                (candidates[i].rate, top)
                if top <= self.budget
                else self.lowered(grid[i], best, candidates[i].rate)
            )
            if held is None:
                update = {"p99_band_high_ms": top, "feasible": False}
                checked[i] = candidates[i].model_copy(update=update)
                continue
            at_held = self.at_rate(grid[i], held)
            checked[i] = at_held.model_copy(update={"p99_band_high_ms": held_top})
            best = max(best, held) if at_held.feasible else best
        return checked

    def lowered(
        self, settings: BatchingSettings, floor: float, rate: float
    ) -> tuple[float | None, float | None]:
        """The highest rate in (floor, rate) whose Verify band's top is within the budget, by
        BAND_STEPS bisection steps, and that top; (None, None) when none is found (at once when
        the band at a `floor` above 0 already passes the budget: nothing here beats it)."""
        if floor > 0 and self.slower_top(settings, floor) > self.budget:
            return None, None
        low, high, held, held_top = floor, rate, None, None
        for _ in range(BAND_STEPS):
            middle = (low + high) / 2
            top = self.slower_top(settings, middle)
            if top <= self.budget:
                low, held, held_top = middle, middle, top
            else:
                high = middle
        return held, held_top

    def slower_top(self, settings: BatchingSettings, rate: float) -> float:
        """The top of a Verify's p99 band at `rate` with the model `margin` slower."""
        most = BAND_CHECKS * (BAND_STEPS + 2)  # each held setting: its rate, a floor, the steps
        return self.band_top(self.slower or self.profile, settings, rate, most=most)

    def band_top(
        self, profile: LatencyProfile, settings: BatchingSettings, rate: float, *, most: int
    ) -> float:
        """The top of a Verify's p99 band at `rate` for `profile`, said to `progress` as one
        of at most `most` band checks."""
        top = simulate_band(
            profile, settings, rate=rate, seconds=VERIFY_SECONDS, seed=self.seed
        ).p99_high_ms
        self.bands += 1
        self.progress(
            min(self.bands / most, 1.0),
            f"Held {setting_line(settings)} to a Verify's p99 band at {_rate(rate)} req/s "
            f"(band check {self.bands}, at most {most})",
        )
        return top

    def best_rate(self, settings: BatchingSettings) -> Candidate:
        """The highest Poisson rate whose p99 fits the budget with the model `margin` slower
        (bisection on that one simulation; the pick is then simulated as profiled too)."""
        check = self.slower or self.profile
        top = capacity(self.profile, settings)
        low, high, found = 0.0, top, None
        for _ in range(BISECTION_STEPS):
            middle = (low + high) / 2
            trial = self.simulate(check, settings, middle)
            if not trial.saturated and trial.p99_ms <= self.budget:
                low = found = middle
            else:
                high = middle
        return self.at_rate(settings, found if found is not None else top * 0.05)


def _choose(
    candidates: list[Candidate],
    grid: list[BatchingSettings],
    rate: float | None,
    budget: float,
    margin: float,
    advice: str,
) -> Recommendation:
    feasible = [i for i, c in enumerate(candidates) if c.feasible]
    if rate is None:
        pick = _most_throughput(candidates)
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
        p99_slower_ms=chosen.p99_slower_ms,
        feasible=chosen.feasible,
        margin=margin,
        reason=_reason(chosen, candidates, rate, budget, margin, advice),
        candidates=candidates,
    )


def _most_throughput(candidates: list[Candidate]) -> int:
    """The feasible candidate held to its band with the highest throughput; with none, the
    checked one whose band came closest to the budget; with none checked, the highest."""
    banded = [i for i, c in enumerate(candidates) if c.p99_band_high_ms is not None]
    held = [i for i in banded if candidates[i].feasible]
    if held:
        return max(
            held,
            key=lambda i: (candidates[i].predicted.throughput, -candidates[i].predicted.p99_ms),
        )
    if banded:
        return min(banded, key=lambda i: candidates[i].p99_band_high_ms or 0.0)
    return max(range(len(candidates)), key=lambda i: candidates[i].predicted.throughput)


def _reason(
    chosen: Candidate,
    candidates: list[Candidate],
    rate: float | None,
    budget: float,
    margin: float,
    advice: str,
) -> str:
    if not chosen.feasible:
        return _missed(chosen, candidates, rate, budget, margin, advice)
    setting, p99, total = setting_line(chosen), chosen.predicted.p99_ms, len(candidates)
    feasible = sum(c.feasible for c in candidates)
    share = f"{margin:.0%}"
    slower = (
        f" ({chosen.p99_slower_ms:.1f} ms with the model {share} slower)"
        if chosen.p99_slower_ms is not None
        else ""
    )
    band = (
        f"; a {VERIFY_SECONDS:g}-s Verify's p99 band"
        f"{f' with the model {share} slower' if margin else ''} reaches "
        f"{chosen.p99_band_high_ms:.1f} ms"
        if chosen.p99_band_high_ms is not None
        else ""
    )
    if rate is None:
        return (
            f"{setting} sustains the most: {_rate(chosen.predicted.throughput)} req/s with p99 "
            f"{p99:.1f} ms{slower}{band}, within {budget:g} ms. That rate is the highest at "
            "which the band stays within the budget: past it, near the setting's knee, some "
            f"Verify runs' queues would grow ({feasible} of {total} settings meet the budget "
            "at some rate)."
        )
    return (
        f"{feasible} of {total} settings keep up with {_rate(rate)} req/s within p99 {budget:g} ms"
        f"{f' even with the model {share} slower' if margin else ''}; {setting} has the most "
        f"headroom (up to {chosen.capacity:.0f} req/s) at p99 {p99:.1f} ms{slower}{band}."
    )


def _missed(
    chosen: Candidate,
    candidates: list[Candidate],
    rate: float | None,
    budget: float,
    margin: float,
    advice: str,
) -> str:
    """Why no setting was feasible: the closest one, and what to change (`advice`)."""
    setting, p99, total = setting_line(chosen), chosen.predicted.p99_ms, len(candidates)
    share = f"{margin:.0%}"
    load = f"{_rate(rate)} req/s" if rate is not None else "any rate tried"
    slower = f" with the model {share} slower than profiled" if margin else ""
    if chosen.p99_band_high_ms is not None and chosen.p99_band_high_ms > budget >= p99:
        return (
            f"No setting of {total} tried keeps p99 within {budget:g} ms across a "
            f"{VERIFY_SECONDS:g}-s Verify's band at {load}{slower}: the closest, {setting}, has "
            f"a predicted p99 of {p99:.1f} ms at {_rate(chosen.rate)} req/s, but its band "
            f"reaches {chosen.p99_band_high_ms:.1f} ms: some of its Verify runs would miss the "
            f"budget. {advice}"
        )
    knees = sum(c.p99_slower_ms is not None and c.p99_slower_ms > budget for c in candidates)
    tight = (
        f" {knees} meet it only at exactly the profiled speed and leave it with the model "
        f"{share} slower (no headroom; lower the speed margin only if the serving machine "
        "is as quiet as the profile's)."
        if knees
        else ""
    )
    return (
        f"No setting of {total} tried keeps p99 within {budget:g} ms at {load}{slower}; the "
        f"lowest p99 is {p99:.1f} ms ({setting}).{tight} {advice}"
    )


def _advice(left_out: str) -> str:
    """What to change where no setting meets the budget: more instances only where the
    search left none out for filling the cores (`searched_counts`); there more instances
    need a machine with more cores."""
    if left_out:
        return (
            "Lower the rate, raise the budget, or serve on a machine with more cores (here more "
            "instances leave no core for the serving threads)."
        )
    return "Add instances, lower the rate, or raise the budget."


def setting_line(setting: Candidate | BatchingSettings) -> str:
    """'max batch 8, timeout 2 ms, 2 instances' (the instances only past one)."""
    line = f"max batch {setting.max_batch_size}, timeout {setting.timeout_ms:g} ms"
    return line + (f", {setting.instances} instances" if setting.instances > 1 else "")


def _rate(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 10 else f"{rate:.2g}"
