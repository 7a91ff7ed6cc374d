"""What the Batching page does, as plain functions that tests call without Streamlit.

The page never runs a model: profile and verify are jobs (by task name); predictions come from
`optistudio.core.batching.simulate` over the stored profile, fast enough to follow a slider.
Each carries its band (`simulate_band`: 20 runs as long as a Verify, on the profile resampled;
0.15-0.3 s on a 2-core machine with a 160-run profile), and a Verify is judged by whether its
measured p99 falls inside the band. The Verify job itself predicts its run before serving and
stores the profile refitted from its batches (workers/batching_jobs.py); the page only reads
the newest refit, names it, and charts how the refits converge.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots
from pydantic import BaseModel
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.batching.applicability import stacking_problem
from optistudio.core.batching.fixed_batch import fixed_at_one
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.recalibrate import calibration_line
from optistudio.core.batching.results import Band, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import (
    VERIFY_SECONDS,
    Process,
    simulate,
    simulate_band,
    simulate_speed_moves,
)
from optistudio.core.batching.specs import BatchingProfileSpec, BatchingVerifySpec
from optistudio.core.batching.trace import slowdown_of
from optistudio.core.batching.triton import triton_config
from optistudio.core.batching.tuner import Candidate, Recommendation, capacity, setting_line
from optistudio.core.model.info import ModelInfo
from optistudio.db.models import JobKind
from optistudio.db.queries import get_job, get_model
from optistudio.db.session import transaction
from optistudio.services.jobresults import RequestSamples, VerifyBatches, VerifyPrediction
from optistudio.studio.charts import batch_axis, log_axis, readable
from optistudio.studio.services import SendTask, submit_job
from optistudio.studio.services import recent_jobs as batching_jobs  # noqa: F401 - the page's name for it

SLIDER_REQUESTS = 5000
"""Requests per simulation behind a slider: p99 within a few percent, well under a second."""
SWEEP_POINTS = 9
SWEEP_DRAWS = 8
"""Draws per point of the rate sweep's bands: lighter than a headline band (9 points share the
time one slider move may take), so their 5 %-95 % points sit nearer the ends of the draws."""
SWEEP_REQUESTS = 4000
"""Most requests per sweep point's band, all its draws together."""
RUNNER_DRIFT = 0.10
"""How far the verify run's model speed may stray from the profile's before the page says so."""
SPEED_STEP = 0.05
"""The change in model speed the page shows the predicted p99 under."""
KNEE = 0.25
"""A p99 that grows by more than this with the model SPEED_STEP slower: the settings' knee."""
TAIL_SPREAD = 0.15
"""How far the measured p99 of a verify run's two halves may part before the page says the
run was too short to judge the predicted p99 by."""
FIGURES = ("throughput", "p50_ms", "p90_ms", "p99_ms", "mean_batch_size", "mean_queue_ms")
LABEL_BOX = (0.14, 0.07)
"""A point label's room on the settings chart, as shares of its width (log p99) and height."""
AS_PROFILED = tuple(
    sorted(set(BatchingProfileSpec.model_fields) & set(BatchingVerifySpec.model_fields))
)
"""What a verify run takes from the profile it checks: where and how the model was served
(backend, device, threads, spin-wait) and its requests (shapes, named dims, fixed values, the
.npz of one request). Every field the two specs share, so a new input field is carried too."""


def model_info(factory: sessionmaker[Session], *, model_id: int) -> tuple[str, ModelInfo]:
    """The stored model's name and card."""
    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        if model is None:
            raise LookupError(f"model {model_id} is gone")
        return model.name, ModelInfo.model_validate(model.info)


def job_spec(factory: sessionmaker[Session], *, job_id: int) -> dict[str, Any]:
    """The stored spec of a job."""
    with transaction(factory) as s:
        job = get_job(s, job_id=job_id)
        return dict(job.spec) if job is not None else {}


def batching_problem(
    info: ModelInfo, batch_axes: dict[str, int | None] | None = None
) -> str | None:
    """Why batching does not apply to this model (requests stack on each input's batch axis,
    `batch_axes` as the input profile moved them), or None. A batch fixed at 1 is no problem
    here: the jobs batch its checked rewrite (`fixed_at_one`)."""
    if fixed_at_one(info, batch_axes):
        return None
    return stacking_problem(info, batch_axes)


def submit(
    factory: sessionmaker[Session], *, kind: JobKind, model_id: int, spec: BaseModel, send: SendTask
) -> int:
    """Commit the job row, then send its id by task name; a broker that is down fails it."""
    return submit_job(factory, kind=kind, model_id=model_id, spec=spec, send=send)


def verify_spec(
    served: BatchingProfileSpec,
    settings: BatchingSettings,
    *,
    rate: float,
    seconds: float,
    profile_job: int | None = None,
) -> BatchingVerifySpec:
    """The verify run of `settings` for the profile made with `served` (by job `profile_job`,
    which the run checks and refits): the same requests on the same backend, device and
    threads, so it measures what was profiled and predicted."""
    carried = {name: getattr(served, name) for name in AS_PROFILED}
    return BatchingVerifySpec(
        **carried, settings=settings, rate=rate, seconds=seconds, profile_job=profile_job
    )


def request_line(served: BatchingProfileSpec) -> str:
    """What one request holds, as the profile made it (and Verify sends it)."""
    parts = [f"{name}={','.join(map(str, shape))}" for name, shape in served.shapes.items()]
    parts += [f"{name}={size}" for name, size in served.dims.items()]
    parts += [f"{name} filled with {value:g}" for name, value in served.values.items()]
    if served.inputs_file:
        parts.append("the arrays of the profile's .npz")
    return "; ".join(parts) if parts else "the model's default inputs"


def profile_in_use(
    profile_job: int, profile: LatencyProfile, verify_jobs: list[dict[str, Any]]
) -> tuple[LatencyProfile, str]:
    """The profile the predictions rest on, and a line naming it: the calibrated profile the
    newest succeeded Verify job of profile job `profile_job` stored (each Verify refits the one
    before it, see workers/batching_jobs.py), or the profile as measured when none did."""
    newest = next(iter(verify_chain(profile_job, verify_jobs)[::-1]), None)
    if newest is None:
        return profile, f"Predictions rest on the profile from job #{profile_job}, as measured."
    prediction: VerifyPrediction = newest["result"].prediction
    calibrated = prediction.calibrated
    moves = ", ".join(
        f"at batch {b} {(calibrated.latency_ms(b) / profile.latency_ms(b) - 1) * 100:+.0f} %"
        for b in profile.batch_sizes
    )
    if calibrated.calibration is None:  # no Verify's refit was adopted yet
        line = f"Predictions rest on the profile from job #{profile_job}, as measured."
    else:
        line = (
            f"Predictions rest on the profile from job #{profile_job}, "
            f"{calibration_line(calibrated)}. Against the profile as measured, the service "
            f"time moved {moves}."
        )
    if prediction.not_adopted:
        line += (
            f" The newest Verify (job #{newest['job']}) did not move it: {prediction.not_adopted}"
        )
    elif prediction.recalibrated is not None:
        before = prediction.at_realised or prediction.predicted
        line += (
            f" For that Verify's own run the refit moved the predicted p99 from "
            f"{_num(before.p99_ms)} to {_num(prediction.recalibrated.p99_ms)} ms "
            f"(measured {_num(newest['result'].measured.p99_ms)} ms)."
        )
    return calibrated, line


def verify_chain(profile_job: int, verify_jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The succeeded Verify jobs (`recent_jobs` rows) that checked and refitted profile job
    `profile_job`, oldest first."""
    chain = [
        job
        for job in verify_jobs
        if job["status"] == "succeeded"
        and job.get("result") is not None
        and getattr(job["result"], "prediction", None) is not None
        and job["result"].prediction.profile_job == profile_job
    ]
    return sorted(chain, key=lambda job: job["job"])


def before_run_line(predicted: LoadResult, band: Band) -> str:
    """What the Verify job predicted before it ran, at the offered rate on fresh arrivals."""
    return (
        f" Before it ran, at the offered rate: p99 {_num(predicted.p99_ms)} ms "
        f"(band {_num(band.p99_low_ms)}-{_num(band.p99_high_ms)})."
    )


def convergence_frame(profile_job: int, verify_jobs: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per Verify of the profile, in order: its rate, the p99 (and band) predicted
    from the profile as refitted before it ran (on the run's own send times where stored), the
    p99 measured, and the p99 its own refit predicts for it. Converging refits bring the
    predicted p99 toward the measured one."""
    rows = []
    for job in verify_chain(profile_job, verify_jobs):
        result = job["result"]
        prediction: VerifyPrediction = result.prediction
        point = prediction.on_arrivals or prediction.predicted
        band = prediction.arrivals_band or prediction.band
        rows.append(
            {
                "verify": f"#{job['job']}",
                "rate": result.measured.offered_rate,
                "predicted_p99_ms": point.p99_ms,
                "p99_low_ms": band.p99_low_ms,
                "p99_high_ms": band.p99_high_ms,
                "measured_p99_ms": result.measured.p99_ms,
                "refitted_p99_ms": (
                    prediction.recalibrated.p99_ms if prediction.recalibrated else None
                ),
                "inside": band.holds_p99(result.measured.p99_ms),
                "error": point.p99_ms / result.measured.p99_ms - 1,
            }
        )
    return pd.DataFrame(rows)


def convergence_figure(frame: pd.DataFrame) -> go.Figure:
    """Predicted (with its band) and measured p99 per Verify, in order, each Verify's rate in
    its label."""
    labels = [
        f"{verify} · {rate:g}/s" if rate else verify
        for verify, rate in zip(frame["verify"], frame["rate"], strict=True)
    ]
    figure = go.Figure()
    figure.add_scatter(
        x=labels,
        y=frame["predicted_p99_ms"],
        mode="markers+lines",
        name="predicted p99 (profile before the run)",
        error_y=_error_bars(frame.rename(columns={"predicted_p99_ms": "p99_ms"}), "p99_ms"),
    )
    figure.add_scatter(
        x=labels, y=frame["measured_p99_ms"], mode="markers+lines", name="measured p99"
    )
    figure.update_xaxes(type="category", title="Verify run (rate)")
    figure.update_yaxes(
        title="p99 (ms)",
        **log_axis([*frame["predicted_p99_ms"], *frame["measured_p99_ms"], *frame["p99_high_ms"]]),
    )
    figure.update_layout(title="Convergence: predicted vs measured p99 per Verify", height=320)
    return _titled(figure)


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
    return (
        f"p99 {_num(predicted.p99_ms)} ms (band {_num(band.p99_low_ms)}-{_num(band.p99_high_ms)}), "
        f"p50 {_num(predicted.p50_ms)} ms (band {_num(band.p50_low_ms)}-{_num(band.p50_high_ms)}), "
        f"throughput {_num(predicted.throughput)} req/s (band {_num(band.throughput_low)}-"
        f"{_num(band.throughput_high)}). The band holds {band.level:.0%} of {band.draws} "
        f"simulated {length}Verify runs, each on the profile's runs resampled: what this "
        "profile knows, so a measured figure outside it says the profile did not describe the "
        "run."
    )


def band_verdict(predicted: LoadResult, band: Band, measured: LoadResult) -> tuple[str, bool]:
    """Whether the measured p99 falls inside the predicted band, and how wide the band is
    (its half-width as a share of the predicted p99); True when inside."""
    inside = band.holds_p99(measured.p99_ms)
    where = "inside" if inside else ("above" if measured.p99_ms > band.p99_high_ms else "below")
    return (
        f"Measured p99 {_num(measured.p99_ms)} ms lies {where} the predicted band "
        f"{_num(band.p99_low_ms)}-{_num(band.p99_high_ms)} ms (±{band.p99_width(predicted.p99_ms):.0%}"
        f" of the predicted {_num(predicted.p99_ms)} ms).",
        inside,
    )


def rate_line(measured: LoadResult) -> tuple[str, bool] | None:
    """The arrival rate the load generator realised beside the one offered, and whether it fell
    more than 10 % short (then measured and predicted describe different loads). None for a
    closed loop or a result stored before the realised rate was kept."""
    offered, realised = measured.offered_rate, measured.realised_rate
    if not offered or realised is None:
        return None
    short = realised < 0.9 * offered
    line = (
        f"Arrivals realised: {_num(realised)} req/s of the {offered:g} offered "
        f"({realised / offered - 1:+.0%})."
    )
    if short:
        line += (
            " The load generator fell behind its schedule (one Python thread cannot go faster "
            "here), so compare with the prediction at the realised rate, or verify at a lower one."
        )
    return line, short


def _num(value: float) -> str:
    """A figure to three significant digits, never in e-notation (2453 ms, 741 ms, 8.25 ms)."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def speed_note(
    profile: LatencyProfile, settings: BatchingSettings, *, rate: float, p99_ms: float
) -> tuple[str, bool]:
    """What the predicted p99 (`p99_ms`: one long simulated run's at `rate`) becomes
    if the model runs SPEED_STEP slower or faster than profiled, and whether that moves it past
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
        f"Against the p99 of one long simulated run, {p99_ms:.2f} ms: with the model {step} slower than "
        f"profiled, {worse}; {step} faster, {better}."
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
    return (
        f"{line}; served at a light rate, each runner call took {profile.served_extra_ms:.2f} ms "
        f"more than profiled{loaded} and each answer came {np.median(delays):.2f} ms (median; "
        f"p99 {np.percentile(delays, 99):.2f} ms) after its batch{heavy}{machinery}: all included in "
        "predictions."
    )


def rate_sweep(
    profile: LatencyProfile, settings: BatchingSettings, *, seconds: float = VERIFY_SECONDS
) -> pd.DataFrame:
    """Predicted figures from 10 % to 110 % of capacity (Poisson), one row per rate, with the
    p50/p99 band of a Verify of `seconds` (SWEEP_DRAWS draws)."""
    top = capacity(profile, settings)
    rows = []
    for share in np.linspace(0.1, 1.1, SWEEP_POINTS):
        result = simulate(profile, settings, rate=top * share, requests=2000)
        band = simulate_band(
            profile, settings, rate=top * share, seconds=seconds, draws=SWEEP_DRAWS,
            max_requests=SWEEP_REQUESTS,
        )  # fmt: skip
        bounds = band.model_dump(include={"p50_low_ms", "p50_high_ms", "p99_low_ms", "p99_high_ms"})
        rows.append({"rate": top * share, **result.model_dump(include=set(FIGURES)), **bounds})
    return pd.DataFrame(rows)


def profile_figure(profile: LatencyProfile) -> go.Figure:
    """Latency (bars) and throughput b / latency(b) (line) per measured batch size."""
    sizes = profile.batch_sizes
    throughput = [b / ms * 1000 for b, ms in zip(sizes, profile.mean_ms, strict=True)]
    labels = [str(b) for b in sizes]
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    figure.add_bar(x=labels, y=profile.mean_ms, name="latency (ms)", marker_color="#9ecae1")
    figure.add_scatter(x=labels, y=throughput, name="throughput (req/s)", secondary_y=True)
    figure.update_xaxes(batch_axis(sizes))
    figure.update_yaxes(title="ms per batch", secondary_y=False)
    figure.update_yaxes(title="requests / s", secondary_y=True)
    figure.update_layout(title="Measured profile", height=340)
    return _titled(figure)


def sweep_figure(frame: pd.DataFrame, rate: float | None) -> go.Figure:
    """Predicted throughput and p50/p99 against the arrival rate, the chosen rate marked."""
    figure = make_subplots(specs=[[{"secondary_y": True}]])
    figure.add_scatter(x=frame["rate"], y=frame["throughput"], name="throughput (req/s)")
    for column, dash in (("p50_ms", "dot"), ("p99_ms", "solid")):
        figure.add_scatter(
            x=frame["rate"],
            y=frame[column],
            name=column.replace("_ms", " (ms)"),
            line={"dash": dash},
            error_y=_error_bars(frame, column),
            secondary_y=True,
        )
    if rate:
        figure.add_vline(x=rate, line_dash="dash", line_color="#888", annotation_text="rate")
    figure.update_xaxes(title="arrival rate (req/s)")
    figure.update_yaxes(title="requests / s", secondary_y=False)
    bands = [frame[c] for c in ("p50_low_ms", "p99_high_ms") if c in frame]
    latency = log_axis([*frame["p50_ms"], *frame["p99_ms"], *(v for c in bands for v in c)])
    figure.update_yaxes(title="latency (ms)", secondary_y=True, **latency)
    figure.update_layout(title="Predicted, by arrival rate", height=340)
    return _titled(figure)


def _error_bars(frame: pd.DataFrame, column: str) -> dict[str, Any] | None:
    """Plotly error bars from a figure's band columns (`p99_low_ms`, ...), None without them.
    A band need not hold its point (the point is a longer run), so a bar is never negative."""
    stem = column.removesuffix("_ms")
    low, high = f"{stem}_low_ms", f"{stem}_high_ms"
    if low not in frame or frame[low].isna().all():
        return None
    return {
        "type": "data",
        "symmetric": False,
        "array": (frame[high] - frame[column]).clip(lower=0).fillna(0).tolist(),
        "arrayminus": (frame[column] - frame[low]).clip(lower=0).fillna(0).tolist(),
    }


def _titled(figure: go.Figure) -> go.Figure:
    """Room for axis titles and labels, and for the figure's title above the plot."""
    return readable(figure).update_layout(margin={"t": 60})


def comparison_frame(
    predicted: LoadResult,
    measured: LoadResult,
    band: Band | None = None,
    at_realised: LoadResult | None = None,
) -> pd.DataFrame:
    """Predicted beside measured for the headline figures, with the relative error; with a
    band, its low and high for p50, p99 and throughput (and whether the measured figure lies
    inside); with `at_realised`, the prediction at the realised arrival rate too."""
    rows = []
    for key in FIGURES:
        p, m = float(getattr(predicted, key)), float(getattr(measured, key))
        row = {"figure": key, "predicted": p, "measured": m, "error": abs(p - m) / m if m else None}
        low, high = _band_bounds(band, key)
        row |= {"low": low, "high": high, "inside": None if low is None else low <= m <= high}
        if at_realised is not None:
            row["predicted at realised rate"] = float(getattr(at_realised, key))
        rows.append(row)
    return pd.DataFrame(rows)


def _band_bounds(band: Band | None, key: str) -> tuple[float | None, float | None]:
    stem, unit = key.removesuffix("_ms"), "_ms" if key.endswith("_ms") else ""
    if band is None or not hasattr(band, f"{stem}_low{unit}"):
        return None, None
    return getattr(band, f"{stem}_low{unit}"), getattr(band, f"{stem}_high{unit}")


def profile_mismatch(
    profile: LatencyProfile, batches: VerifyBatches | None, *, slowdown: float | None = None
) -> str | None:
    """Why measured and predicted may differ: the model ran more than RUNNER_DRIFT faster or
    slower during the verify run than the profile says (`slowdown`: as the Verify job measured
    it against the profile it rested on; else from its batches against `profile`). None when
    it did not, or for a verify job stored before batches were recorded."""
    if slowdown is None and (batches is None or not batches.runner):
        return None
    ratio = slowdown if slowdown is not None else slowdown_of(batches.runner, profile)  # type: ignore[union-attr]
    if abs(ratio - 1) <= RUNNER_DRIFT:
        return None
    pace = f"{ratio:.2f}x slower" if ratio > 1 else f"{1 / ratio:.2f}x faster"
    return (
        f"The model ran {pace} during this verify run than in the profile, so predicted and "
        "measured describe different machines (other load on it, clocks): the gap in p99 comes "
        "from that, not from the batching policy. Profile again when the machine is as it will "
        "be in service, then verify."
    )


def tail_note(measured: LoadResult, halves: tuple[float, float] | None) -> tuple[str, bool] | None:
    """How settled the measured p99 is: its value in the run's first and second halves, and
    whether they part by more than TAIL_SPREAD of it (then the run was too short to read the
    prediction's p99 error from it). None for a run too short to split (or stored before)."""
    if not halves:
        return None
    first, second = halves
    spread = abs(first - second) / measured.p99_ms
    line = (
        f"Measured p99 in the run's first half {first:.1f} ms, in its second {second:.1f} ms "
        f"({spread:.0%} of the whole run's {measured.p99_ms:.1f} ms)."
    )
    if spread <= TAIL_SPREAD:
        return line, False
    return (
        line + " A p99 rests on a few bursts of arrivals, and this run did not hold enough of "
        "them to pin it down: before reading the prediction's p99 error from it, verify for "
        "longer (four times as long roughly halves how far a p99 moves).",
        True,
    )


def comparison_figure(frame: pd.DataFrame) -> go.Figure:
    """Predicted (with its band as error bars, where the frame has one) and measured latency."""
    latency = frame[frame["figure"].str.endswith("_ms")]
    figure = go.Figure()
    bars = None
    if "low" in latency and latency["low"].notna().any():
        bars = {
            "type": "data",
            "symmetric": False,
            "array": (latency["high"] - latency["predicted"]).clip(lower=0).fillna(0).tolist(),
            "arrayminus": (latency["predicted"] - latency["low"]).clip(lower=0).fillna(0).tolist(),
        }
    figure.add_bar(x=latency["figure"], y=latency["predicted"], name="predicted", error_y=bars)
    figure.add_bar(x=latency["figure"], y=latency["measured"], name="measured")
    figure.update_layout(
        title="Predicted vs measured latency", yaxis_title="ms", barmode="group", height=320
    )
    return _titled(figure)


def timeline_figure(requests: RequestSamples) -> go.Figure:
    """Each measured request over the run: queue wait and compute stacked."""
    figure = go.Figure()
    sent = [t / 1000 for t in requests.sent_ms]
    figure.add_scatter(x=sent, y=requests.queue_ms, mode="markers", name="queue wait (ms)")
    figure.add_scatter(x=sent, y=requests.latency_ms, mode="markers", name="total (ms)")
    figure.update_layout(
        title="Measured requests", xaxis_title="sent at (s)", yaxis_title="ms", height=320
    )
    figure.update_traces(marker={"size": 4, "opacity": 0.6})
    return _titled(figure)


def candidates_figure(advice: Recommendation) -> go.Figure:
    """Every setting tried: throughput against p99; those that meet the budget with the speed
    margin in green, those that meet it only at the profiled speed in orange, the pick ringed.
    Every point has its setting in its hover, and on the chart where the label has room (the pick
    first, then those that meet the budget, lowest p99 first): at a fixed rate most settings
    reach the same throughput, and their labels would print over each other."""
    labelled = _spaced(advice.candidates, advice.settings)
    figure = go.Figure()
    groups = {
        "meets the budget": ([c for c in advice.candidates if c.feasible], "#2ca02c"),
        f"only at the profiled speed (not {advice.margin:.0%} slower)": (
            [c for c in advice.candidates if c.p99_slower_ms is not None and not c.feasible],
            "#ff7f0e",
        ),
        "misses it": (
            [c for c in advice.candidates if c.p99_slower_ms is None and not c.feasible],
            "#bbbbbb",
        ),
    }
    for name, (chosen, colour) in groups.items():
        if not chosen:
            continue
        figure.add_scatter(
            x=[c.predicted.p99_ms for c in chosen],
            y=[c.predicted.throughput for c in chosen],
            mode="markers+text",
            marker={"color": colour, "size": 9},
            name=name,
            text=[_candidate_label(c) if id(c) in labelled else "" for c in chosen],
            textposition="top center",
            textfont={"size": 9},
            cliponaxis=False,
            hovertext=[_candidate_text(c, advice.margin) for c in chosen],
            hoverinfo="text",
        )
    figure.add_scatter(
        x=[advice.predicted.p99_ms],
        y=[advice.predicted.throughput],
        mode="markers",
        marker={"size": 18, "symbol": "circle-open", "color": "#d62728", "line": {"width": 3}},
        name="recommended",
        hovertext=[f"recommended: {_candidate_label(advice.settings)}"],
        hoverinfo="text",
    )
    figure.update_layout(
        title="Settings tried (label: max batch size · timeout ×instances)",
        xaxis_title="p99 (ms)",
        yaxis_title="throughput (req/s)",
        height=400,
    )
    figure.update_xaxes(log_axis(c.predicted.p99_ms for c in advice.candidates))
    return _titled(figure)


def _spaced(candidates: list[Candidate], pick: BatchingSettings) -> set[int]:
    """The ids of the candidates whose label fits without covering one placed before it."""
    x = np.log10([c.predicted.p99_ms for c in candidates])
    y = np.array([c.predicted.throughput for c in candidates])
    x, y = (x - x.min()) / (np.ptp(x) or 1.0), (y - y.min()) / (np.ptp(y) or 1.0)
    order = sorted(
        range(len(candidates)),
        key=lambda i: (not _same_setting(candidates[i], pick), not candidates[i].feasible, x[i]),
    )
    placed: list[int] = []
    for i in order:
        if all(
            abs(x[i] - x[j]) >= LABEL_BOX[0] or abs(y[i] - y[j]) >= LABEL_BOX[1] for j in placed
        ):
            placed.append(i)
    return {id(candidates[i]) for i in placed}


def _same_setting(candidate: Candidate, settings: BatchingSettings) -> bool:
    same_size = candidate.max_batch_size == settings.max_batch_size
    same = same_size and candidate.instances == settings.instances
    return same and candidate.timeout_ms == settings.timeout_ms


def _candidate_label(setting: Candidate | BatchingSettings) -> str:
    """A point's label: 'b8 · 2 ms' is max batch size 8 with a 2 ms timeout ('×2' after it:
    on 2 instances)."""
    label = f"b{setting.max_batch_size} · {setting.timeout_ms:g} ms"
    return label + (f" ×{setting.instances}" if setting.instances > 1 else "")


def _candidate_text(candidate: Candidate, margin: float) -> str:
    text = setting_line(candidate)
    if candidate.p99_slower_ms is not None:
        text += f"; p99 {candidate.p99_slower_ms:.1f} ms with the model {margin:.0%} slower"
    return text


def pipeline_json(name: str, backend: str, settings: BatchingSettings, shapes: dict) -> str:
    """The settings for our runtime: `Pipeline.load(model, BatchingSettings(**json['batching']))`."""
    document = {
        "model": name,
        "backend": backend,
        "shapes": shapes,
        "instances": settings.instances,
        "batching": settings.model_dump(mode="json"),
    }
    return json.dumps(document, indent=2) + "\n"


def triton_text(name: str, info: ModelInfo, settings: BatchingSettings) -> str:
    """Triton config.pbtxt for the settings (preferred sizes: the given ones, else max)."""
    return triton_config(
        _triton_name(name),
        info,
        max_batch_size=settings.max_batch_size,
        preferred_batch_sizes=settings.preferred_batch_sizes or [settings.max_batch_size],
        max_queue_delay_us=round(settings.timeout_ms * 1000),
        instances=settings.instances,
    )


def _triton_name(name: str) -> str:
    stem = name.rsplit(".", 1)[0] if name.endswith(".onnx") else name
    cleaned = "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in stem)
    return cleaned or "model"
