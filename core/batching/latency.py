"""Measured latency per batch size (`LatencyProfile`): what the batching simulator reads.

A profile holds, per measured batch size, the mean latency of one run, its p50/p99, the
percentiles 0, 1, ..., 100 (`quantiles_ms`) and every run in the order it ran (`runs`), plus the
runtime's own cost per batch under load (`handoff_ms`). Between measured sizes latency is
interpolated linearly; past the largest it is extrapolated along the last segment's slope
(never falling). `optistudio.core.batching.latency_profile` measures one.

Those figures are one instance's. `instance_latency` holds how much slower a batch runs on one
of N instances busy at once (measured N: 1, 2, 4, ... up to the cores); `at_instances(N)` is
the profile as one of N instances sees it, which the simulator and the ceiling take
(optistudio.core.batching.instances states the rule for a count that was not measured).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from optistudio.core.batching.instances import (
    InstanceLatency,
    instance_factors,
    instances_note,
    served_row,
)
from optistudio.core.machine.pace import WINDOW_S, unsteady

QUANTILE_COUNT = 101
"""Percentiles kept per batch size: 0, 1, ..., 100."""
HANDOFF_GAPS = 400
"""Most hand-back times a profile keeps."""
IDLE_FLOOR_MS = 0.05
"""An idle gap this short (ms) changes nothing: the model ran back to back."""
TIMED_CALLS_KEPT = 400
"""Most runner calls a timer probe keeps in `timed_calls`, evenly spaced over its run."""
TIMED_CALLS_MIN = 30
"""Fewest calls the simulator draws a batch size's spread from: fewer leave its tail to chance."""
TIMED_CALLS_POOLED = 5
"""Fewest calls of one size whose deviations from their median join the spread the sizes with
fewer than TIMED_CALLS_MIN of their own share."""


class Calibration(BaseModel):
    """How a profile was refitted from a Verify run's own batches
    (optistudio.core.batching.recalibrate)."""

    model_config = ConfigDict(extra="forbid")

    verify: str = Field(description="The Verify run it was refitted from, e.g. 'Verify #12'.")
    batches: int = Field(ge=0, description="Batches of that run the refit rests on.")
    p50_moved: dict[int, float] = Field(
        description="Per measured batch size, how much the p50 service time moved (%)."
    )
    handoff_before_ms: float | None = None
    handoff_after_ms: float | None = None
    weights: dict[int, int] = Field(
        default_factory=dict,
        description="Per measured batch size, the runs and batches the latency now rests on "
        "(the next refit weighs its own batches against these).",
    )
    previous: list[str] = Field(
        default_factory=list, description="Earlier Verify runs the profile was refitted from."
    )
    delays_rate: float | None = Field(
        default=None,
        description="The rate (req/s) the run served at, when its answers' serving delays "
        "joined `serving_delays_load`; None when they did not (a closed loop, a saturated "
        "run, or a profile without a light set to mix them with).",
    )


CHECK_MIN_REQUESTS = 200
"""Fewest requests a served probe must have answered to count in `LatencyProfile.served_error`:
the p99 of fewer is little more than its slowest answer."""


class ServedCheck(BaseModel):
    """One of the profile's own serving probes replayed by the simulator once the profile was
    whole: what the real Pipeline measured against what the simulator predicts for the same
    settings on the probe's own send times (optistudio.core.batching.served_checks)."""

    model_config = ConfigDict(extra="forbid")

    rate: float = Field(gt=0, description="The probe's Poisson rate (req/s).")
    timeout_ms: float = Field(ge=0, description="Its batching timeout (ms).")
    max_batch_size: int = Field(ge=1)
    requests: int = Field(ge=0, description="Requests it answered.")
    measured_p99_ms: float = Field(gt=0)
    simulated_p99_ms: float = Field(gt=0)
    instances: int = Field(default=1, ge=1, description="Instances it served through.")
    speed: float = Field(
        default=1.0,
        gt=0,
        description="The machine's speed against the profile while the probe ran (> 1 slower, "
        "optistudio.core.batching.probe_speed): the simulation ran the model at it, so the "
        "error is the simulator's, not the machine's.",
    )

    @property
    def error(self) -> float:
        """Measured over simulated p99: above 1, the simulator predicted this run too fast."""
        return self.measured_p99_ms / self.simulated_p99_ms


QUICK_PROBE_SCALE = 0.25
"""The serving probes' length in a quick profile (a share of their full length): the profile
takes about a third of the time (6 s instead of 16 s for a small model at max batch 4)."""


class LatencyProfile(BaseModel):
    """Measured latency (ms) per batch size, sorted by batch size."""

    model_config = ConfigDict(extra="forbid")

    batch_sizes: list[int] = Field(description="Measured batch sizes, ascending.")
    mean_ms: list[float] = Field(description="Mean latency of one run at each batch size.")
    p50_ms: list[float] = Field(default_factory=list)
    p99_ms: list[float] = Field(default_factory=list)
    quantiles_ms: list[list[float]] = Field(
        default_factory=list,
        description="Per batch size, latency at percentiles 0, 1, ..., 100 (101 values).",
    )
    runs: list[tuple[int, float]] = Field(
        default_factory=list,
        description="Every timed run in the order it ran: (batch size, ms). Empty in profiles "
        "made before runs were kept; the simulator then draws from quantiles_ms.",
    )
    handoff_ms: float | None = Field(
        default=None,
        ge=0,
        description="Mean time (ms) from the end of one batch's run to the cut of the next "
        "under a saturating closed loop through the Pipeline at the largest batch size: results "
        "handed back, callers woken, the next batch cut. The simulator adds it per batch. None "
        "in profiles made before it was measured.",
    )
    handoff_gaps_ms: list[float] = Field(
        default_factory=list,
        description="The hand-back times (ms) `handoff_ms` is the mean of, one per batch, in the "
        "order measured (at most HANDOFF_GAPS kept). The simulator draws each batch's hand-back "
        "from them and its band resamples them. Empty in profiles made before they were kept.",
    )
    idle_extra_ms: list[tuple[float, float]] = Field(
        default_factory=list,
        description="(idle gap ms, extra ms): how much longer a batch-1 run took when the model "
        "had been idle that long before it than right after another run (median of paired "
        "runs), ascending by gap. Positive on a quiet machine (caches, clocks and threads gone "
        "cold), negative where neighbours load the cores (a sleeper is scheduled first). The "
        "simulator adds `idle_extra(gap)` to a batch that starts after a gap. Empty in profiles "
        "made before it was measured.",
    )
    served_extra_ms: float = Field(
        default=0.0,
        description="Mean extra ms a batch's runner call took when the model was served at a "
        "light open-loop rate through the Pipeline (another thread submitting, the GIL, wake-ups "
        "and caches shared with the serving threads), beyond its profiled latency and idle "
        "extra. The simulator adds it to every batch. 0 in profiles made before it was measured.",
    )
    served_extra_load: list[tuple[float, float]] = Field(
        default_factory=list,
        description="(request rate req/s, extra ms per runner call) served at a light and at a "
        "heavy rate, ascending by rate, and last, where the runtime's pace with its queue never "
        "empty was below the ceiling the others give, that pace with the extra that holds the "
        "ceiling to it: under load the serving threads take the cores and the "
        "GIL the runner's return needs, so its call takes longer the more requests come. The "
        "simulator takes the extra at the rate it simulates (linear between the points, flat "
        "beyond them), and the ceiling is the rate the runtime keeps up with at its own extra. "
        "Empty in profiles made before it was measured: `served_extra_ms` at every rate.",
    )
    serving_delays_ms: list[float] = Field(
        default_factory=list,
        description="Per request of that light-load run, its measured latency less its own "
        "queue wait and its batch's runner call (and the profile's `request_ms`): the way in, "
        "the stacking, the wake-ups and hand-back of one request outside its batch's time (at "
        "most SERVING_DELAYS kept). The simulator "
        "adds one, drawn, to each request's latency; it does not hold the instance. Empty in "
        "profiles made before they were measured.",
    )
    serving_delays_rate: float | None = Field(
        default=None,
        gt=0,
        description="The request rate (req/s) the light probe served at when "
        "`serving_delays_ms` was measured. None in profiles made before it was kept (then "
        "`served_extra_load`'s first rate, the same probe's, when there is one).",
    )
    serving_delays_load: list[tuple[float, list[float]]] = Field(
        default_factory=list,
        description="(request rate req/s, serving delays ms) measured at other rates than "
        "the light one `serving_delays_ms` comes from (`serving_delays_rate`): the heavy "
        "serving probe's, and each recalibrating Verify's at the rate it served; ascending by "
        "rate. Under load the serving threads stall more often and for longer (a descheduled "
        "core stops the sender and the batcher together), and at thousands of requests a "
        "second each stall holds many answers. The simulator draws a "
        "request's delay from the two sets around the rate it simulates, mixed by where the "
        "rate lies between them (flat beyond). Empty where no heavy probe kept up, and in "
        "profiles made before it was kept.",
    )
    request_ms: float = Field(
        default=0.0,
        ge=0,
        description="The serving machinery's time per request with no model: one over the "
        "requests per second the load generator and the Pipeline served through a runner that "
        "returns at once (one thread's sends, each request's check and queueing, its share of "
        "the batch's stacking and hand-back, all under one GIL). The simulator passes every "
        "request through it in turn before the request joins the batch queue, so it caps the "
        "ceiling at 1000 / request_ms whatever the batch size. 0 where it was not measured: "
        "`unmeasured` then says why (in profiles made before it, nothing does).",
    )
    timer_late_ms: list[float] = Field(
        default_factory=list,
        description="Per batch a batching timeout cut in a light run through the Pipeline "
        "(optistudio.core.batching.timer_wake), how many ms after its deadline the serving "
        "thread woke and cut it (timer slack, the thread's turn on a core, the GIL). The "
        "simulator draws one for every timeout it waits on. Empty in profiles made before it "
        "was measured: timed batches leave on the dot.",
    )
    timed_rate: float | None = Field(
        default=None,
        gt=0,
        description="The request rate (req/s) of the timer probe (optistudio.core.batching."
        "timer_wake: a light run with a batching timeout), where `timed_extra_ms` and "
        "`timed_delays_ms` were measured. None in profiles made before they were kept.",
    )
    timed_extra_ms: float | None = Field(
        default=None,
        ge=0,
        description="The extra ms per runner call in the timer probe, taken as "
        "`served_extra_ms` is: with batches that wait on a timeout the serving thread sleeps "
        "on a timed wait between them, and the runner call comes out slower than at timeout 0 "
        "(on 2 shared cores a 0.1 ms model: 0.2-0.4 ms more per call at timeout 2 ms, 0.03-0.1 "
        "at timeout 0, at the same rates and gaps). For settings with a timeout the simulator "
        "takes it in place of the light probe's extra (`served_extra_at`).",
    )
    timed_batch: float | None = Field(
        default=None,
        ge=1,
        description="The mean rows per batch in the timer probe, where `timed_extra_ms` was "
        "measured (with `timed_load`'s, the sizes `timed_extra_by_size` rests on). None in "
        "profiles made before it was kept.",
    )
    timed_delays_ms: list[float] = Field(
        default_factory=list,
        description="Per request of the timer probe, its serving delay as `serving_delays_ms` "
        "has it (at most SERVING_DELAYS kept). For settings with a timeout the simulator draws "
        "from them in place of the light probe's set (`serving_delays_at`).",
    )
    timed_load: list[tuple[float, float, list[float], float]] = Field(
        default_factory=list,
        description="(request rate req/s, extra ms per runner call, serving delays ms, mean "
        "rows per batch) served "
        "with the timer probe's timeout at a rate where batches fill (timer_wake."
        "measure_timed_under_load), above `timed_rate`: the runner's extra grows with the "
        "batch. For settings with a timeout the simulator interpolates between the timer "
        "probe's point, these, and the timeout-0 probes' points above them (the saturated "
        "pace). Empty where that probe fell behind, and in profiles made before it.",
    )
    timed_calls: list[tuple[int, float]] = Field(
        default_factory=list,
        description="(rows, the runner's extra ms) per runner call of the timer probes (the "
        "light one and `timed_load`'s), taken as `served_extra_ms` is, at most TIMED_CALLS_KEPT "
        "per probe, evenly spaced. With batches that wait on a timeout the runner call spreads "
        "wider than the bare runs back to back: on 2 shared cores a 0.1 ms CNN's served calls "
        "at batch 7-8 had a p99 of 1.3 ms where its bare runs plus the median extra gave 0.8-0.9. "
        "For settings with a timeout the simulator draws each call's deviation from them "
        "(`timed_extra_spread`). Empty in profiles made before they were kept.",
    )
    unmeasured: dict[str, str] = Field(
        default_factory=dict,
        description="Field name -> one sentence on why that probe could not be measured on "
        "the machine that made the profile (a probe that kept up with every rate it sent, a "
        "closed loop with no two batches back to back). Such a field holds its empty value "
        "(None or 0) and the predictions leave that cost out.",
    )
    batched_rewrite: str = Field(
        default="",
        description="Set when the model's batch was fixed at 1 and the profile timed its "
        "checked rewrite with a free batch (optistudio.core.batching.fixed_batch): one line.",
    )
    batch_refused: str = Field(
        default="",
        description="Set when the model's batch is fixed at 1 and its rewrite with a free "
        "batch was refused (the graph mixes the samples of a batch): why, in one line. Only "
        "batch 1 was timed and it is served at max batch 1; more instances are what can help.",
    )
    instance_latency: list[InstanceLatency] = Field(
        default_factory=list,
        description="Per instance count N > 1 measured (ascending), the latency of a batch on "
        "one of N instances running at once, each with its share of the threads, against the "
        "one-instance figures above. Empty in profiles made before it was measured (and on one "
        "core): only one instance was measured.",
    )
    backend: str = ""
    probe_time_scale: float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Length of the serving probes as a share of their full length: 1 in a full "
        "profile, QUICK_PROBE_SCALE in a quick one, whose serving figures rest on fewer requests.",
    )
    environment: dict[str, object] = Field(default_factory=dict)
    calibration: Calibration | None = Field(
        default=None, description="Set when refitted from a Verify run; None as measured."
    )
    served_checks: list[ServedCheck] = Field(
        default_factory=list,
        description="The profile's serving probes that kept up, each replayed by the simulator "
        "on its own send times once the profile was whole (`served_error`). Empty in profiles "
        "made before they were kept.",
    )
    probe_speeds: list[Annotated[float, Field(gt=0)]] = Field(
        default_factory=list,
        description="The machine's speed against the profile's timings over each of its serving "
        "probes, in the order they ran (> 1 slower; optistudio.core.batching.probe_speed): how "
        "far the machine's pace moved within seconds, which a Verify minutes later meets too, "
        "either way of the profile's own timings (`paces`). Empty in profiles made before they "
        "were kept.",
    )

    @model_validator(mode="after")
    def _consistent(self) -> LatencyProfile:
        if not self.batch_sizes or len(self.batch_sizes) != len(self.mean_ms):
            raise ValueError("a profile needs one mean latency per batch size")
        if self.batch_sizes != sorted(set(self.batch_sizes)) or self.batch_sizes[0] < 1:
            raise ValueError("batch sizes must be distinct, ascending and >= 1")
        if min(self.mean_ms) <= 0:
            raise ValueError("latencies must be positive")
        if self.quantiles_ms and (
            len(self.quantiles_ms) != len(self.batch_sizes)
            or len({len(q) for q in self.quantiles_ms}) != 1
            or len(self.quantiles_ms[0]) < 2
        ):
            raise ValueError("quantiles_ms needs as many values for every batch size (>= 2)")
        if self.runs and not {size for size, _ in self.runs} <= set(self.batch_sizes):
            raise ValueError("runs may only hold measured batch sizes")
        if any(ms <= 0 for _, ms in self.runs):
            raise ValueError("run latencies must be positive")
        if [rate for rate, _ in self.served_extra_load] != sorted(
            {rate for rate, _ in self.served_extra_load}
        ):
            raise ValueError("served_extra_load's rates must be distinct and ascending")
        load_rates = [rate for rate, _ in self.serving_delays_load]
        if load_rates != sorted(set(load_rates)) or any(not d for _, d in self.serving_delays_load):
            raise ValueError("serving_delays_load needs distinct ascending rates, each with delays")
        if load_rates and not (self.light_rate() and self.serving_delays_ms):
            raise ValueError("serving_delays_load needs the light probe's rate and delays")
        if any(ms < 0 for ms in self.handoff_gaps_ms):
            raise ValueError("hand-back times cannot be negative")
        if any(ms < 0 for ms in self.timer_late_ms):
            raise ValueError("timer lateness cannot be negative")
        if (
            self.timed_extra_ms is not None or self.timed_delays_ms or self.timed_calls
        ) and self.timed_rate is None:
            raise ValueError(
                "timed_extra_ms, timed_delays_ms and timed_calls need the timer probe's rate"
            )
        if any(rows < 1 for rows, _ in self.timed_calls):
            raise ValueError("timed_calls' batches hold at least one row")
        timed_rates = [point[0] for point in self.timed_load]
        if timed_rates and (
            self.timed_rate is None
            or self.timed_extra_ms is None
            or timed_rates != sorted(set(timed_rates))
            or timed_rates[0] <= self.timed_rate
            or any(not point[2] or point[3] < 1 for point in self.timed_load)
        ):
            raise ValueError(
                "timed_load needs the timer probe's point and distinct ascending rates above "
                "it, each with delays"
            )
        if [gap for gap, _ in self.idle_extra_ms] != sorted({g for g, _ in self.idle_extra_ms}):
            raise ValueError("idle gaps must be distinct and ascending")
        if any(gap <= IDLE_FLOOR_MS for gap, _ in self.idle_extra_ms):
            raise ValueError(f"idle gaps must be longer than {IDLE_FLOOR_MS} ms")
        counts = [row.instances for row in self.instance_latency]
        if counts != sorted(set(counts)):
            raise ValueError("instance_latency's instance counts must be distinct and ascending")
        if any(len(row.slowdown) != len(self.batch_sizes) for row in self.instance_latency):
            raise ValueError("instance_latency needs one slowdown per batch size")
        return self

    def served_error(self, *, timed: bool) -> float | None:
        """How far the simulator was off on this profile's own served probes: the median of
        `served_errors`; None when none counts."""
        errors = self.served_errors(timed=timed)
        return float(np.median(errors)) if errors else None

    def served_errors(self, *, timed: bool, instances: int = 1) -> list[float]:
        """The simulator's error on each of this profile's own served probes, ascending:
        measured over simulated p99 (`ServedCheck.error`) of the one-instance checks with a
        timeout (`timed`) or without, and for `instances` past one also every check served
        with that many instances (or the most measured below it) whatever its timeout: those
        hold what sharing the cores with more sessions costs. Each of at least
        CHECK_MIN_REQUESTS requests. [] when none counts, and for a profile refitted from a
        Verify run (its Verify judges it instead)."""
        if self.calibration is not None:
            return []
        counted = [c for c in self.served_checks if c.requests >= CHECK_MIN_REQUESTS]
        errors = [c.error for c in counted if c.instances == 1 and (c.timeout_ms > 0) == timed]
        served = [c.instances for c in counted if 1 < c.instances <= instances]
        if served:
            errors += [c.error for c in counted if c.instances == max(served)]
        return sorted(errors)

    def paces(self) -> list[float]:
        """The speeds a band draws the model's pace from (optistudio.core.batching.simulate):
        the profile's own timings (1.0), each of `probe_speeds`, and each one's inverse; [] when
        it kept none. The inverses: the profile's timings are one moment of the pace that moved
        beside its probes, not the machine's usual one, so a probe that ran s times as slow as
        they did says they may have been caught s times as slow, and a Verify later runs 1/s
        of them (on 2 quiet cores, 2026-12-07: a PP-OCR recognizer profiled while the probes
        beside it ran 1.04-1.16x slower, then served 7-15 % faster than the profile in one
        Verify round, under a band drawn from the slow side alone; docs/BENCHMARKS.md)."""
        if not self.probe_speeds:
            return []
        return [1.0, *self.probe_speeds, *(1.0 / speed for speed in self.probe_speeds)]

    def instance_counts(self) -> list[int]:
        """The instance counts this profile measured: 1 and each of `instance_latency`'s."""
        return [1, *(row.instances for row in self.instance_latency)]

    def at_instances(self, instances: int, *, served: bool = True) -> LatencyProfile:
        """The profile as one of `instances` busy instances sees it: every latency of the
        model times that count's slowdown per batch size, and with `served` the runtime's
        costs as that many instances were served at (`served_as`; else one instance's stay);
        without the table of measured counts it is itself (`instances_note` says how an
        unmeasured count is taken). A profile refitted from a Verify run keeps its refitted
        serving costs."""
        factors = instance_factors(self.instance_latency, len(self.batch_sizes), instances)
        if factors is None:
            return self
        by_size = dict(zip(self.batch_sizes, factors, strict=True))
        scaled = self.scaled_by(by_size).model_copy(update={"instance_latency": []})
        row = served_row(self.instance_latency, instances)
        if row is None or not served or self.calibration is not None:
            return scaled
        return scaled.served_as(row)

    def served_as(self, row: InstanceLatency) -> LatencyProfile:
        """The profile with `row`'s served measurements in place of one instance's above the
        light rate: its heavy point (extra per call, serving delays) and its saturation point.
        One instance's heavy and saturation points go where the row has a heavy point: they
        were served with a core to spare for the serving threads."""
        light = self.light_rate()
        if row.served_load is None or light is None or row.served_load[0] <= light:
            return self.with_saturation(row.saturation)
        first = self.served_extra_load[0] if self.served_extra_load else None
        load = [first or (round(light, 3), self.served_extra_ms), row.served_load]
        delays = [(row.served_load[0], row.serving_delays_ms)] if row.serving_delays_ms else []
        update = {"served_extra_load": load, "serving_delays_load": delays}
        return self.model_copy(update=update).with_saturation(row.saturation)

    def with_saturation(self, point: tuple[float, float] | None) -> LatencyProfile:
        """The profile with a saturation probe's point (pace, extra) last in
        `served_extra_load`. A point at or above that pace goes (its probe sent faster than
        the runtime serves and only just kept up); a profile with no point above its light
        one gets the light one before it, so the extra grows between the two. Itself when the
        point's extra is no larger than the last point's (the profile already predicts that
        pace) or there is no light rate."""
        light = self.light_rate()
        if point is None or light is None or point[0] <= light:
            return self
        load = [(rate, extra) for rate, extra in self.served_extra_load if rate < point[0]]
        load = load or [(round(light, 3), self.served_extra_ms)]
        if point[1] <= load[-1][1]:
            return self
        return self.model_copy(update={"served_extra_load": [*load, point]})

    def instances_note(self, instances: int) -> str:
        """How `instances` instances are predicted when this profile did not measure that
        count (one sentence), else ''."""
        return instances_note(self.instance_latency, instances)

    def unmeasured_note(self) -> str:
        """One sentence per cost the profile could not measure (`unmeasured`), for the reasons
        a prediction or a recommendation gives; empty when every probe measured."""
        names = {
            "request_ms": "Serving machinery per request",
            "handoff_ms": "Hand-back",
            "served_extra_ms": "Serving at a light rate",
        }
        return " ".join(
            f"{names.get(field, field)}: {why}." for field, why in self.unmeasured.items()
        )

    def quick_note(self) -> str:
        """A sentence for the predictions of a quick profile (shortened serving probes); empty
        for a full one."""
        if self.probe_time_scale >= 1:
            return ""
        return (
            f"A quick profile: its serving probes ran {self.probe_time_scale:.0%} of their full "
            "length, so its serving figures rest on fewer requests and Verify lands outside the "
            "band more often; profile at full length before trusting a p99."
        )

    def pace_note(self) -> str:
        """A sentence where the machine's own pace moved while this profile ran (its
        `environment["machine_pace"]`, optistudio.core.machine.pace); empty where it held
        steady or was not read (profiles made before it)."""
        pace = self.environment.get("machine_pace")
        if not isinstance(pace, dict) or not unsteady(pace):
            return ""
        return (
            f"This machine's own speed moved while the profile ran: a plain loop, read before "
            f"and after the probes, ran up to {pace['spread']:.1f}x as long in "
            f"{pace['slow_share']:.0%} of its {WINDOW_S:g}-s windows (a neighbour on the host "
            "that the CPU's steal counter does not show). A Verify may run the model slower "
            "than any pace the band holds; profile again when the machine is steady, or "
            "Verify more than once before trusting a p99."
        )

    def typical_ms(self, batch_size: int) -> float:
        """A typical run of a batch of this size: the p50 interpolated between measured sizes
        (the mean where the profile kept no p50), flat beyond them."""
        return float(np.interp(batch_size, self.batch_sizes, self.p50_ms or self.mean_ms))

    def latency_ms(self, batch_size: int) -> float:
        """Latency of a batch of this size (interpolated between measured sizes)."""
        sizes, means = self.batch_sizes, self.mean_ms
        if len(sizes) == 1:
            return means[0] * batch_size / sizes[0] if batch_size > sizes[0] else means[0]
        if batch_size <= sizes[-1]:
            return float(np.interp(batch_size, sizes, means))
        slope = (means[-1] - means[-2]) / (sizes[-1] - sizes[-2])
        return means[-1] + max(slope, 0.0) * (batch_size - sizes[-1])

    def idle_extra(self, gap_ms: float) -> float:
        """Extra ms a batch takes after the model was idle `gap_ms`: 0 without a gap (or
        without measurements), the measured extras interpolated on a log scale of the gap from
        0 at IDLE_FLOOR_MS, the longest gap's beyond it."""
        return self.idle_extra_curve()(gap_ms)

    def idle_extra_curve(self) -> Callable[[float], float]:
        """`idle_extra` with its curve read once, for a caller that asks per batch (the
        simulator)."""
        if not self.idle_extra_ms:
            return lambda gap_ms: 0.0
        gaps = np.log([IDLE_FLOOR_MS, *(gap for gap, _ in self.idle_extra_ms)])
        extras = np.asarray([0.0, *(extra for _, extra in self.idle_extra_ms)])

        def extra(gap_ms: float) -> float:
            return (
                0.0 if gap_ms <= IDLE_FLOOR_MS else float(np.interp(np.log(gap_ms), gaps, extras))
            )

        return extra

    def scaled(self, factor: float) -> LatencyProfile:
        """The same profile with the model `factor` times as slow (every latency scaled; the
        runtime's hand-back time per batch is not the model's and stays)."""
        if factor <= 0:
            raise ValueError(f"a speed factor must be positive, got {factor}")
        sizes = {*self.batch_sizes, *(size for size, _ in self.runs)}
        return self.scaled_by(dict.fromkeys(sizes, factor))

    def runtime_scaled(self, factor: float) -> LatencyProfile:
        """The same profile with the runtime's own costs `factor` times as long: the hand-back,
        the extras per runner call (idle, served, under load, with a timeout), the serving
        delays, the machinery's time per request and the timer's lateness; the model's
        latencies and every rate stay. With `scaled`, a machine `factor` times as slow
        (`at_pace`): the serving threads run on the same cores as the model."""
        if factor <= 0:
            raise ValueError(f"a speed factor must be positive, got {factor}")

        def times(values: list[float]) -> list[float]:
            return [ms * factor for ms in values]

        return self.model_copy(
            update={
                "handoff_ms": None if self.handoff_ms is None else self.handoff_ms * factor,
                "handoff_gaps_ms": times(self.handoff_gaps_ms),
                "idle_extra_ms": [(gap, ms * factor) for gap, ms in self.idle_extra_ms],
                "served_extra_ms": self.served_extra_ms * factor,
                "served_extra_load": [(rate, ms * factor) for rate, ms in self.served_extra_load],
                "serving_delays_ms": times(self.serving_delays_ms),
                "serving_delays_load": [
                    (rate, times(delays)) for rate, delays in self.serving_delays_load
                ],
                "request_ms": self.request_ms * factor,
                "timer_late_ms": times(self.timer_late_ms),
                "timed_extra_ms": (
                    None if self.timed_extra_ms is None else self.timed_extra_ms * factor
                ),
                "timed_delays_ms": times(self.timed_delays_ms),
                "timed_load": [
                    (rate, extra * factor, times(delays), batch)
                    for rate, extra, delays, batch in self.timed_load
                ],
                "timed_calls": [(rows, ms * factor) for rows, ms in self.timed_calls],
            }
        )

    def at_pace(self, factor: float) -> LatencyProfile:
        """The profile on a machine `factor` times as slow as when it was made: the model's
        latencies (`scaled`) and the runtime's own costs (`runtime_scaled`) alike."""
        return self.scaled(factor).runtime_scaled(factor)

    def scaled_by(self, factors: Mapping[int, float]) -> LatencyProfile:
        """Every latency of the model at each batch size times that size's factor (the
        runtime's costs per batch stay): a refit, one of N busy instances, a slower model."""
        row = [factors[size] for size in self.batch_sizes]

        def times(values: list[float]) -> list[float]:
            return [ms * f for ms, f in zip(values, row, strict=True)] if values else values

        return self.model_copy(
            update={
                "mean_ms": times(self.mean_ms),
                "p50_ms": times(self.p50_ms),
                "p99_ms": times(self.p99_ms),
                "quantiles_ms": [
                    [ms * f for ms in q] for q, f in zip(self.quantiles_ms, row, strict=False)
                ],
                "runs": [(size, ms * factors[size]) for size, ms in self.runs],
            }
        )

    def ceiling(
        self, max_batch_size: int, *, with_handoff: bool = False, instances: int = 1
    ) -> tuple[float, int]:
        """The best throughput `instances` alike instances can reach (rows/s) and the batch size
        giving it: the model's own (bare runs back to back), or with_handoff the runtime's, each
        batch also paying `handoff_ms` and `served_extra_ms`, and no more requests a second
        than the serving machinery passes (1000 / `request_ms`, shared by the instances).
        Each instance's latency is the profile's `at_instances(instances)`."""
        if instances > 1 and self.instance_latency:
            return self.at_instances(instances).ceiling(
                max_batch_size, with_handoff=with_handoff, instances=instances
            )
        if not with_handoff:
            return self._ceiling_at(max_batch_size, 0.0, instances)
        cap = 1000.0 / self.request_ms if self.request_ms > 0 else float("inf")

        def at(rate: float | None) -> tuple[float, int]:
            extra = (self.handoff_ms or 0.0) + self.served_extra_at(rate)
            top, best = self._ceiling_at(max_batch_size, extra, instances)
            return min(top, cap), best

        if len(self.served_extra_load) < 2:
            return at(None)
        low, high = 0.0, at(0.0)[0]  # the rate the runtime keeps up with at its own extra
        for _ in range(40):
            middle = (low + high) / 2
            low, high = (middle, high) if at(middle)[0] > middle else (low, middle)
        return at(low)

    def _ceiling_at(self, max_batch_size: int, extra: float, instances: int) -> tuple[float, int]:
        best = max(range(1, max_batch_size + 1), key=lambda b: b / (self.latency_ms(b) + extra))
        return best / (self.latency_ms(best) + extra) * 1000.0 * instances, best

    def served_extra_at(self, rate: float | None, *, timed: bool = False) -> float:
        """The extra ms per runner call when served at `rate` req/s: `served_extra_load`
        interpolated (flat beyond its points), `served_extra_ms` without a rate or points.
        Each point's extra is at least every lower rate's (a running maximum): more requests a
        second never make the serving threads' work per call smaller, so a point measured
        lower than the one before is the probes' noise, and taken as it is it would predict a
        tail that shrinks as the load grows. `timed`: for settings with a batching timeout,
        the timer probe's point (`timed_rate`, `timed_extra_ms`) stands for the light one
        where the profile has it, `timed_load`'s after it, and the points measured at timeout 0
        above them (the saturated pace holds whatever the timeout)."""
        points = self.served_extra_load
        if timed and self.timed_rate is not None and self.timed_extra_ms is not None:
            timed_points = [(point[0], point[1]) for point in self.timed_load]
            last = timed_points[-1][0] if timed_points else self.timed_rate
            above = timed_points + [(r, e) for r, e in points[1:] if r > last]
            points = [(self.timed_rate, self.timed_extra_ms), *above]
            if rate is None or len(points) < 2:
                return self.timed_extra_ms
        if rate is None or len(points) < 2:
            return self.served_extra_ms
        extras = np.maximum.accumulate([e for _, e in points])
        return max(float(np.interp(rate, [r for r, _ in points], extras)), 0.0)

    def timed_extra_by_size(self) -> Callable[[int], float] | None:
        """The runner's extra ms per call for a batch of a given size with a batching timeout:
        the timer probes' extras (`timed_extra_ms` at `timed_batch`, `timed_load`'s at theirs)
        interpolated by batch size, flat beyond them, and never smaller for a larger batch (a
        running maximum). With a timeout the extra grows with the batch, not with the rate:
        batches fill at a third of the ceiling already. None without the probes' batch sizes."""
        if self.timed_batch is None or self.timed_extra_ms is None:
            return None
        points = sorted(
            [(self.timed_batch, self.timed_extra_ms)] + [(p[3], p[1]) for p in self.timed_load]
        )
        sizes = np.asarray([size for size, _ in points])
        extras = np.maximum.accumulate([extra for _, extra in points])
        return lambda size: float(np.interp(size, sizes, extras))

    def timed_extra_spread(self, largest: int) -> dict[int, np.ndarray]:
        """Per batch size 1..`largest`: how a call's extra (ms) spreads around its size's
        median, drawn one per call by the simulator around the size's extra
        (`timed_extra_by_size`). A size with at least TIMED_CALLS_MIN calls in `timed_calls`
        has its own; the others share every call's deviation from its own size's median (the
        sizes with at least TIMED_CALLS_POOLED calls), where those are TIMED_CALLS_MIN or more.
        Empty without the probes' batch sizes or enough calls (the simulator then adds the
        size's extra to a bare run)."""
        if self.timed_extra_by_size() is None:
            return {}
        calls: dict[int, list[float]] = {}
        for rows, extra in self.timed_calls:
            calls.setdefault(rows, []).append(extra)
        own = {
            rows: np.asarray(extras) - np.median(extras)
            for rows, extras in calls.items()
            if len(extras) >= TIMED_CALLS_POOLED
        }
        shared = np.concatenate(list(own.values())) if own else np.zeros(0)
        spread = {}
        for rows in range(1, largest + 1):
            if rows in own and len(own[rows]) >= TIMED_CALLS_MIN:
                spread[rows] = own[rows]
            elif len(shared) >= TIMED_CALLS_MIN:
                spread[rows] = shared
        return spread

    def light_rate(self) -> float | None:
        """The rate (req/s) `serving_delays_ms` was measured at, where the profile knows it."""
        if self.serving_delays_rate is not None:
            return self.serving_delays_rate
        return self.served_extra_load[0][0] if self.served_extra_load else None

    def serving_delays_at(self, rate: float | None, *, timed: bool = False) -> list[float]:
        """The serving delays (ms) a request served at `rate` req/s draws from: between two
        measured rates a mix of both sets, the nearer one's share the larger (as many as the
        larger set, evenly spaced over each set's run), the nearest set beyond them, and the
        light set `serving_delays_ms` without a rate or other sets. `timed`: for settings with
        a batching timeout, the timer probe's set (`timed_delays_ms` at `timed_rate`) stands
        for the light one where the profile has it, `timed_load`'s after it, and the sets
        measured at timeout 0 above them."""
        light, light_set = self.light_rate(), self.serving_delays_ms
        loaded = self.serving_delays_load
        if timed and self.timed_rate is not None and self.timed_delays_ms:
            light, light_set = self.timed_rate, self.timed_delays_ms
            timed_sets = [(point[0], point[2]) for point in self.timed_load]
            last = timed_sets[-1][0] if timed_sets else light
            loaded = timed_sets + [(r, d) for r, d in loaded if r > last]
        if rate is None or not loaded or light is None:
            return light_set
        points = sorted([(light, light_set), *loaded])
        rates = [r for r, _ in points]
        if rate <= rates[0]:
            return points[0][1]
        if rate >= rates[-1]:
            return points[-1][1]
        upper = int(np.searchsorted(rates, rate))
        (low_rate, low), (high_rate, high) = points[upper - 1], points[upper]
        count = max(len(low), len(high))
        heavy = round(count * (rate - low_rate) / (high_rate - low_rate))
        return _spread(low, count - heavy) + _spread(high, heavy)

    def quantile_curve(self, batch_size: int) -> np.ndarray:
        """Latency percentiles (ms) at a batch size: the measured spread relative to the mean,
        interpolated between measured sizes, scaled so that drawing along the curve (linear
        between percentiles) averages `latency_ms`. Flat without quantiles."""
        mean = self.latency_ms(batch_size)
        if not self.quantiles_ms:
            return np.full(QUANTILE_COUNT, mean)
        table = np.asarray(self.quantiles_ms) / np.asarray(self.mean_ms)[:, None]
        sizes = np.asarray(self.batch_sizes)
        count = table.shape[1]
        shape = np.array([np.interp(batch_size, sizes, table[:, k]) for k in range(count)])
        drawn_mean = float((shape[:-1] + shape[1:]).mean() / 2)
        return shape * (mean / drawn_mean)

    def speed_timeline(self) -> tuple[np.ndarray, np.ndarray]:
        """The runs as a clock of work: cumulative wall seconds and, at the same points,
        cumulative work in seconds at the profile's mean speed (a run of size b is
        latency_ms(b) of work). Both start at 0; their ratio over a stretch is the machine's
        speed then, and over all runs it is 1."""
        wall = np.cumsum([0.0] + [ms for _, ms in self.runs]) / 1000.0
        by_size = {size: self.latency_ms(size) for size in {size for size, _ in self.runs}}
        work = np.cumsum([0.0] + [by_size[size] for size, _ in self.runs]) / 1000.0
        return wall, work


def _spread(values: list[float], count: int) -> list[float]:
    """`count` of `values` evenly spaced over them (repeating some when count is larger)."""
    if count <= 0 or not values:
        return []
    return [values[i] for i in np.linspace(0, len(values) - 1, count).round().astype(int)]
