"""The simulator checked against the profile's own served probes, and bands that hold its error.

A latency profile serves the model through the real Pipeline several times (the light and
heavy serving probes at timeout 0, the timer probes with a batching timeout, see
optistudio.core.batching.latency_profile). Once the profile is whole, each of those runs that
kept up is replayed by the simulator on its own send times (`served_checks`), with the model
at the speed the machine had while it ran (the bare timings beside each probe,
optistudio.core.batching.probe_speed): what it measured against what the simulator says for
the very same arrivals, settings and speed, with no arrival luck or machine pace between
them. The ratio is the simulator's error on this model and machine, and
it is mostly one-sided for a given profile (on 2 shared cores, 2026-12-06: a BERT-style
encoder's probes measured 1.00-1.26x the simulated p99, its Verify runs 1.05-1.40x the
predicted; a transformer block's 0.70-0.94x, its Verify runs 0.81-0.99x). A band drawn from the
profile alone holds the profile's sampling spread, not that error, so the profile's bands for
settings of the same kind (with a batching timeout or without) also hold the prediction
moved by the median error (`simulate_band`, optistudio.core.batching.simulate): from the
band to the band times the error, whichever way it points. The headline stays the
simulator's. The machine's pace itself, how far its speed moved from probe to probe, the bands
hold apart (`LatencyProfile.probe_speeds`, drawn per band draw).

A profile refitted from a Verify run is judged by that run instead, and widened by nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from optistudio.core.batching.handoff import KEPT_UP, ServedRun
from optistudio.core.batching.latency import LatencyProfile, ServedCheck
from optistudio.core.batching.simulate import simulate


def served_checks(profile: LatencyProfile, runs: Sequence[ServedRun]) -> list[ServedCheck]:
    """Each of `runs` that kept up (served at least KEPT_UP of the rate it realised, and not
    saturated) with its p99 as measured and as `profile` simulates it on the run's own send
    times with the model at the machine's speed then (`ServedRun.speed`), in the order they
    ran."""
    checks = []
    for served in runs:
        result = served.run.result
        kept_up = result.throughput >= KEPT_UP * (result.realised_rate or served.rate)
        if not served.run.batches or result.saturated or not kept_up or result.p99_ms <= 0:
            continue
        sent = [ms / 1000 for ms in served.run.sent_ms]
        at_speed = profile.scaled(served.speed) if served.speed != 1.0 else profile
        simulated = simulate(at_speed, served.settings, arrivals=sent, warmup_share=0.0)
        if simulated.p99_ms <= 0:
            continue
        checks.append(
            ServedCheck(
                rate=round(served.rate, 3),
                timeout_ms=served.settings.timeout_ms,
                max_batch_size=served.settings.max_batch_size,
                instances=served.settings.instances,
                requests=result.completed,
                measured_p99_ms=round(result.p99_ms, 4),
                simulated_p99_ms=round(simulated.p99_ms, 4),
                speed=round(served.speed, 4),
            )
        )
    return checks
