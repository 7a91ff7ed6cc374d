"""The Batching page's what-if: the sliders' ranges, the predictions and their bands, the
instances.

Plain functions the page calls and tests call without Streamlit. The page never runs a model:
predictions come from `optistudio.core.batching.simulate` over the stored profile, fast enough to
follow a slider. Each carries its band (`simulate_band`: 20 runs as long as a Verify, on the
profile resampled; 0.15-0.3 s on a 2-core machine with a 160-run profile). Three rules:
  - the headline p50, p99 and throughput are the median of the same simulated Verify runs the
    band is the 5 %-95 % of (`Band.p99_ms`, ...), so a headline always lies inside its band;
  - the arrival-rate slider spans up to RATE_HEADROOM x the highest ceiling any instance count
    on the slider reaches (each at the latencies measured with that many busy), in a 1-2-5
    step of about 1/RATE_STEPS of that; its bounds come from the profile as measured, which a
    Verify's refit does not move, so a Verify never resets the rate;
  - the instances slider spans the counts the profile measured; a profile that measured one
    only offers EXTRA_INSTANCES more, predicted as independent copies and said so.
A rate above the setting's ceiling is said in one sentence (`overload_line`) and shows no
latency figure: there the percentiles grow with the run's length (core.batching.overload), so
the headline's and the sweep's past the ceiling are left empty.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from optistudio.core.batching.fixed_batch import FIXED_BATCH_NOTE
from optistudio.core.batching.freeing import BatchFreeing, batch_freeing, card_freeing
from optistudio.core.batching.freeing import batching_problem as freeing_problem
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.overload import overload
from optistudio.core.batching.results import Band, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import (
    VERIFY_SECONDS,
    Process,
    simulate,
    simulate_band,
    simulate_speed_moves,
)
from optistudio.core.batching.tuner import capacity
from optistudio.core.model.info import ModelInfo

RATE_HEADROOM = 1.5
RATE_STEPS = 200
EXTRA_INSTANCES = 1
"""Instances past one offered for a profile that measured only one (unmeasured: said so)."""
TABLE_REQUESTS = 3000
"""Requests per instance count in the what-if's table of instance counts."""
SLIDER_REQUESTS = 5000
"""Requests per simulation behind a slider: p99 within a few percent, well under a second."""
SWEEP_POINTS = 9
SWEEP_DRAWS = 8
"""Draws per point of the rate sweep's bands: lighter than a headline band (9 points share the
time one slider move may take), so their 5 %-95 % points sit nearer the ends of the draws."""
SWEEP_REQUESTS = 4000
"""Most requests per sweep point's band, all its draws together."""
SPEED_STEP = 0.05
"""The change in model speed the page shows the predicted p99 under."""
KNEE = 0.25
"""A p99 that grows by more than this with the machine SPEED_STEP slower (the model and the
serving costs): the settings' knee."""
PACE_SHOWN = 0.02
"""Narrowest range of paces (`Band.paces`) the band's sentence names: less is the timer's noise."""
FIGURES = {
    "throughput": "throughput (req/s)",
    "p50_ms": "p50 (ms)",
    "p90_ms": "p90 (ms)",
    "p99_ms": "p99 (ms)",
    "mean_batch_size": "mean batch size",
    "mean_queue_ms": "mean queue wait (ms)",
}
"""The figures a prediction and a Verify give, each with its name on the page."""


def batching_problem(
    info: ModelInfo,
    batch_axes: dict[str, int | None] | None = None,
    freeing: BatchFreeing | None = None,
) -> str | None:
    """Why batching does not apply to this model (requests stack on each input's batch axis,
    `batch_axes` as the input profile moved them), or None: the rule the batching jobs follow
    (`core.batching.freeing`), so a batch declared at 1, on dim 0 or on a recurrent state's
    axis (`freeing`, read from the graph), is no problem here: the jobs batch its checked
    rewrite."""
    return freeing_problem(info, batch_axes, freeing)


def batching_note(freeing: BatchFreeing) -> str:
    """The page's line on the rewrite the jobs batch ('' when they batch the model itself)."""
    if freeing.states:
        return freeing.state_note()
    return FIXED_BATCH_NOTE if freeing.fixed else ""


def model_freeing(
    model: Path | None, info: ModelInfo, batch_axes: dict[str, int | None] | None = None
) -> BatchFreeing:
    """What the jobs free in the model file (`batch_freeing` of its graph, weights not read),
    or, when the file is not at hand, what its card shows (`card_freeing`)."""
    if model is None:
        return card_freeing(info, batch_axes)
    return batch_freeing(onnx.load(str(model), load_external_data=False).graph, batch_axes)


def most_instances(profile: LatencyProfile) -> int:
    """The instances slider's top: the largest count measured (1 + EXTRA_INSTANCES for a
    profile that measured one only)."""
    counts = profile.instance_counts()
    return counts[-1] if len(counts) > 1 else 1 + EXTRA_INSTANCES


def nice_step(span: float) -> float:
    """A 1-2-5 step near span / RATE_STEPS (0.01 at least): 75 req/s -> 0.5, 1500 -> 5."""
    raw = max(span / RATE_STEPS, 0.01)
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw * 0.999)


def rate_bounds(profile: LatencyProfile, largest_batch: int) -> tuple[float, float, float]:
    """(lowest, highest, step) of the arrival-rate slider, from `profile` as measured: up to
    RATE_HEADROOM x the best served ceiling of any count the instances slider offers."""
    top = max(
        profile.ceiling(largest_batch, with_handoff=True, instances=n)[0]
        for n in range(1, most_instances(profile) + 1)
    )
    step = nice_step(top * RATE_HEADROOM)
    high = max(step * 2, math.ceil(top * RATE_HEADROOM / step) * step)
    return step, round(high, 6), step


def kept_rate(value: float | None, bounds: tuple[float, float, float], default: float) -> float:
    """The rate to show: the one kept (a Verify's run of the page keeps it), pulled into the
    slider's range and onto its step; `default` when none is kept."""
    low, high, step = bounds
    if value is None:
        value = default
    value = min(max(value, low), high)
    return round(round(value / step) * step, 6) if value > low else low


def headline(band: Band, point: LoadResult, *, overloaded: bool = False) -> dict[str, float | None]:
    """The what-if's figures: p50, p99 and throughput from the band's own draws (median), so
    they lie inside it; mean batch and queue wait from the one long run `point`. A band stored
    before it kept its median gives the point's figures. `overloaded` (`overload_line`): no
    latency figure, each None."""
    figures: dict[str, float | None] = {
        "throughput": band.throughput if band.throughput is not None else point.throughput,
        "p50_ms": band.p50_ms if band.p50_ms is not None else point.p50_ms,
        "p99_ms": band.p99_ms if band.p99_ms is not None else point.p99_ms,
        "mean_batch_size": point.mean_batch_size,
        "mean_queue_ms": point.mean_queue_ms,
    }
    if overloaded:
        figures |= {"p50_ms": None, "p99_ms": None, "mean_queue_ms": None}
    return figures


def overload_line(profile: LatencyProfile, settings: BatchingSettings, rate: float) -> str | None:
    """'Overloaded: ceiling X req/s below the offered Y req/s; latency grows without bound.'
    for a rate the settings cannot serve, else None."""
    sentence = overload(profile, settings, rate)
    return f"{sentence[0].upper()}{sentence[1:]}." if sentence else None


def overloaded_band_line(band: Band) -> str:
    """What an overloaded prediction still says: its throughput with the band, no latency."""
    throughput = f"{three_digits(band.throughput_low)}-{three_digits(band.throughput_high)}"
    served = three_digits(band.throughput) if band.throughput is not None else throughput
    return (
        f"Served: {served} req/s (band {throughput}, {band.level:.0%} of {band.draws} simulated "
        "Verify runs). No latency is predicted: each request waits behind a queue that grows "
        "for as long as the rate lasts, so a percentile says how long the run was, not how "
        "the settings serve. Raise the max batch size or instances, or lower the rate."
    )


def instances_caption(profile: LatencyProfile, instances: int) -> str:
    """How the chosen instance count is predicted: measured (threads each, slowdown), or the
    rule taken for an unmeasured count."""
    note = profile.instances_note(instances)
    if note or instances == 1:
        return note
    row = next(r for r in profile.instance_latency if r.instances == instances)
    slowdown = ", ".join(
        f"b{b} {f:.2f}x" for b, f in zip(profile.batch_sizes, row.slowdown, strict=True)
    )
    return (
        f"{instances} instances measured running at once, {row.threads} thread(s) each: a batch "
        f"on one of them takes {slowdown} one instance's time; predictions use that."
    )


def by_instances(profile: LatencyProfile, settings: BatchingSettings, rate: float) -> pd.DataFrame:
    """Per instance count on the slider, the settings' prediction at `rate`: throughput, p99,
    the served ceiling and whether the count was measured."""
    measured = set(profile.instance_counts())
    rows = []
    for count in range(1, most_instances(profile) + 1):
        setting = settings.model_copy(update={"instances": count})
        result = simulate(profile, setting, rate=rate, requests=TABLE_REQUESTS)
        rows.append(
            {
                "instances": count,
                "measured": count in measured,
                "throughput": result.throughput,
                "p99_ms": None if result.saturated else result.p99_ms,
                "ceiling": profile.ceiling(
                    settings.max_batch_size, with_handoff=True, instances=count
                )[0],
            }
        )
    return pd.DataFrame(rows)


def predict(
    profile: LatencyProfile,
    settings: BatchingSettings,
    *,
    rate: float | None,
    process: Process = "poisson",
    clients: int = 0,
) -> LoadResult:
    """The simulator's prediction for the sliders' settings."""
    return simulate(
        profile, settings, rate=rate, process=process, clients=clients, requests=SLIDER_REQUESTS
    )


def predict_band(
    profile: LatencyProfile,
    settings: BatchingSettings,
    *,
    rate: float | None,
    seconds: float = VERIFY_SECONDS,
    process: Process = "poisson",
    clients: int = 0,
) -> Band:
    """The prediction's band for a Verify of `seconds` at `rate` (the module docstring)."""
    return simulate_band(
        profile, settings, rate=rate, process=process, clients=clients, seconds=seconds
    )


def band_line(predicted: LoadResult, band: Band) -> str:
    """The headline figures with their bands, and what the band stands for."""
    length = f"{band.seconds:g}-s " if band.seconds else ""
    p99 = f"{three_digits(band.p99_low_ms)}-{three_digits(band.p99_high_ms)}"
    p50 = f"{three_digits(band.p50_low_ms)}-{three_digits(band.p50_high_ms)}"
    throughput = f"{three_digits(band.throughput_low)}-{three_digits(band.throughput_high)}"
    return (
        f"p99 {three_digits(predicted.p99_ms)} ms (band {p99}), "
        f"p50 {three_digits(predicted.p50_ms)} ms (band {p50}), "
        f"throughput {three_digits(predicted.throughput)} req/s (band {throughput}). "
        f"The band holds {band.level:.0%} of {band.draws} "
        f"simulated {length}Verify runs, each on the profile's runs resampled: what this "
        "profile knows, so a measured figure outside it says the profile did not describe the "
        "run." + served_error_line(band) + pace_line(band) + saturated_line(band)
    )


def saturated_line(band: Band) -> str:
    """How many of the band's draws could not keep up with the rate, when any could not: the
    setting lies past its ceiling at their paces, and the band's top is a growing queue's wait
    ('' otherwise, and for bands stored before it was kept)."""
    if not band.saturated_share:
        return ""
    count = round(band.saturated_share * band.draws)
    return (
        f" In {count} of its {band.draws} draws the queue kept growing through the run (the "
        "model, at the slower of the paces the profile saw, could not keep up with this rate): "
        f"that is where the band's top of {three_digits(band.p99_high_ms)} ms comes from. A "
        "lower rate, a larger max batch or another instance leaves room for such a pace."
    )


def pace_line(band: Band) -> str:
    """The paces the band's draws ran the model at, when the profile kept the machine's speed
    beside its serving probes and it moved ('' otherwise)."""
    if not band.paces or band.paces[1] - band.paces[0] < PACE_SHOWN:
        return ""
    low, high = band.paces
    return (
        f" It also holds the model and its serving threads at {low:.2f}-{high:.2f}x their "
        "profiled time: the machine's "
        "speed moved that much beside the profile's own serving probes, either way of the "
        "profile's own timings (one moment of that pace), and a Verify minutes later meets "
        "such a pace too."
    )


def served_error_line(band: Band) -> str:
    """What the p99 band was stretched to hold, when it was: the simulator's own error on the
    profile's served probes ('' when it was not)."""
    if band.served_error is None:
        return ""
    low, high = band.served_error_range or (band.served_error, band.served_error)
    span = f"x{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"x{low:.2f}-{high:.2f}"
    direction = "slower" if low > 1 else "faster" if high < 1 else "slower and faster"
    return (
        f" Its p99 also spans the prediction {span}: the profile's own serving probes ran "
        f"{direction} than the simulator predicted for them (measured over simulated p99, "
        "each probe), so the band holds that error too."
    )


def three_digits(value: float) -> str:
    """A figure to three significant digits, never in e-notation (2453 ms, 741 ms, 8.25 ms)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def speed_note(
    profile: LatencyProfile, settings: BatchingSettings, *, rate: float, p99_ms: float
) -> tuple[str, bool]:
    """What the predicted p99 (`p99_ms`: one long simulated run's at `rate`) becomes
    if the machine runs SPEED_STEP slower or faster than profiled (the model's latencies and the
    runtime's own costs alike: `simulate_speed_moves`), and whether that moves it past
    KNEE (then the settings have no headroom, and one measurement of them is as uncertain as
    the machine's speed)."""
    slower, faster = simulate_speed_moves(
        profile, settings, step=SPEED_STEP, rate=rate, requests=SLIDER_REQUESTS
    )
    step = f"{SPEED_STEP:.0%}"
    if slower.saturated:
        worse, rise = "the queue would keep growing", float("inf")
    else:
        rise = slower.p99_ms / p99_ms - 1
        worse = _moved(slower.p99_ms, rise, up=True)
    better = _moved(faster.p99_ms, faster.p99_ms / p99_ms - 1, up=False)
    line = (
        f"Against the p99 of one long simulated run, {p99_ms:.2f} ms: with the model and the "
        f"serving costs {step} slower than profiled, {worse}; {step} faster, {better}."
    )
    if rise <= KNEE:
        return line, False
    return (
        line + " These settings sit at their knee: a little more load on the machine or a few "
        "more requests per second and the tail grows fast, so a measured p99 will swing from "
        "run to run. For headroom raise the max batch size, the timeout or the instances, or "
        "plan for a lower rate.",
        True,
    )


def _moved(p99_ms: float, change: float, *, up: bool) -> str:
    """The moved p99 and its change, when it moved the way the model's speed did. A move the
    other way (the model slower, the p99 lower) is the simulation's sampling noise: a p99 of
    SLIDER_REQUESTS requests rests on its slowest 1 %, and the change of speed shifts which
    bursts of arrivals those meet. Its figure would contradict the words, so none is given."""
    if change == 0 or (change > 0) != up:
        return "no change beyond the prediction's own noise"
    percent = f"{change:+.0%}" if abs(change) >= 0.01 else f"{change:+.1%}"  # never '+0%'
    return f"p99 {p99_ms:.2f} ms ({percent})"


def handoff_line(profile: LatencyProfile) -> str:
    """One line on the runtime's cost per batch that the predictions carry (or do not)."""
    if profile.handoff_ms is None and "handoff_ms" in profile.unmeasured:
        return f"Per-batch hand-back under load: {profile.unmeasured['handoff_ms']}."
    if profile.handoff_ms is None:
        return (
            "Per-batch hand-back under load: not measured (this profile predates it), so the "
            "predictions add none; profile again to include it."
        )
    line = f"Per-batch hand-back under load: {profile.handoff_ms:.2f} ms"
    if not profile.serving_delays_ms:
        return line + ", included in predictions."
    delays = np.asarray(profile.serving_delays_ms).clip(min=0)
    loaded = ""
    if len(profile.served_extra_load) > 1:
        rate, extra = profile.served_extra_load[-1]
        loaded = f" ({extra:.2f} ms at {rate:.0f} req/s)"
    heavy = ""
    if profile.serving_delays_load:  # the heaviest rate's, where stalls of the serving threads show
        rate, drawn = profile.serving_delays_load[-1]
        heavy = f" (p99 {np.percentile(np.clip(drawn, 0, None), 99):.2f} ms at {rate:.0f} req/s)"
    machinery = ""
    if profile.request_ms:
        machinery = (
            f"; with no model the serving machinery passes {1000 / profile.request_ms:.0f} "
            "req/s at most"
        )
    elif "request_ms" in profile.unmeasured:
        machinery = f"; {profile.unmeasured['request_ms']}"
    timed = ""
    if profile.timed_extra_ms is not None and profile.timed_delays_ms:
        answers = np.asarray(profile.timed_delays_ms).clip(min=0)
        filled = ""
        if profile.timed_load:  # the heaviest rate's, where timed batches fill
            rate, extra, _, batch = profile.timed_load[-1]
            filled = f" ({extra:.2f} ms at {rate:.0f} req/s, batches of {batch:.1f})"
        spread = ""
        if profile.timed_calls:
            tail = np.percentile([extra for _, extra in profile.timed_calls], 99)
            spread = f" (p99 {tail:.2f} ms over {len(profile.timed_calls)} calls)"
        timed = (
            f"; with a batching timeout ({profile.timed_rate:.0f} req/s) each runner call took "
            f"{profile.timed_extra_ms:.2f} ms more{filled}{spread} and each answer came "
            f"{np.median(answers):.2f} ms (median) after its batch, which settings with a "
            "timeout use"
        )
    return (
        f"{line}; served at a light rate, each runner call took {profile.served_extra_ms:.2f} ms "
        f"more than profiled{loaded} and each answer came {np.median(delays):.2f} ms (median; "
        f"p99 {np.percentile(delays, 99):.2f} ms) after its batch{heavy}{timed}{machinery}: all "
        "included in predictions."
    )


def rate_sweep(
    profile: LatencyProfile, settings: BatchingSettings, *, seconds: float = VERIFY_SECONDS
) -> pd.DataFrame:
    """Predicted figures from 10 % to 110 % of capacity (Poisson), one row per rate, with the
    p50/p99 band of a Verify of `seconds` (SWEEP_DRAWS draws); past capacity no latency."""
    top = capacity(profile, settings)
    rows = []
    for share in np.linspace(0.1, 1.1, SWEEP_POINTS):
        result = simulate(profile, settings, rate=top * share, requests=2000)
        band = simulate_band(
            profile, settings, rate=top * share, seconds=seconds, draws=SWEEP_DRAWS,
            max_requests=SWEEP_REQUESTS,
        )  # fmt: skip
        bounds = band.model_dump(include={"p50_low_ms", "p50_high_ms", "p99_low_ms", "p99_high_ms"})
        row = {"rate": top * share, **result.model_dump(include=set(FIGURES)), **bounds}
        if share > 1:  # overloaded: its percentiles grow with the run, none is shown
            row |= dict.fromkeys([*bounds, "p50_ms", "p90_ms", "p99_ms", "mean_queue_ms"], None)
        rows.append(row)
    return pd.DataFrame(rows)
