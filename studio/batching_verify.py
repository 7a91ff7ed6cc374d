"""The Batching page's Verify: the run that checks a prediction, and how it is judged.

A Verify serves the model as its profile was made (`verify_spec`) and is judged by whether its
measured p99 falls inside the predicted band. The Verify job itself predicts its run before
serving and stores the profile refitted from its batches, by the policy in
optistudio.core.batching.verify_policy; the page reads the newest refit by the same policy,
names it (`profile_in_use`), and charts how the refits converge.
"""

from __future__ import annotations

import pandas as pd

from optistudio.core.batching import verify_policy
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.recalibrate import calibration_line
from optistudio.core.batching.results import Band, LoadResult
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import BatchingVerifySpec, LatencyProfileSpec
from optistudio.core.batching.trace import slowdown_of
from optistudio.core.batching.verify_gap import speed_gap_note
from optistudio.core.batching.verify_policy import VerifyPrediction
from optistudio.services.jobresults import BatchingVerifyJobResult, VerifyBatches
from optistudio.studio.batching_whatif import FIGURES, pace_line, served_error_line, three_digits
from optistudio.studio.formatting import readable_frame
from optistudio.studio.job_view import JobView

RUNNER_DRIFT = 0.10
"""How far the verify run's model speed may stray from the profile's before the page says so."""
TAIL_SPREAD = 0.15
"""How far the measured p99 of a verify run's two halves may part before the page says the
run was too short to judge the predicted p99 by."""
AS_PROFILED = tuple(
    sorted(set(LatencyProfileSpec.model_fields) & set(BatchingVerifySpec.model_fields))
)
"""What a verify run takes from the profile it checks: where and how the model was served
(backend, device, threads, spin-wait) and its requests (shapes, named dims, fixed values, the
.npz of one request). Every field the two specs share, so a new input field is carried too."""
FIGURE_COLUMNS = ["predicted", "measured", "low", "high", "predicted at realised rate"]
"""The columns of `comparison_frame` that hold a figure (the others: its name, error, inside)."""
TABLE_HEADERS = {"low": "band low", "high": "band high", "inside": "inside the band"}


def verify_spec(
    served: LatencyProfileSpec,
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


def request_line(served: LatencyProfileSpec) -> str:
    """What one request holds, as the profile made it (and Verify sends it)."""
    parts = [f"{name}={','.join(map(str, shape))}" for name, shape in served.shapes.items()]
    parts += [f"{name}={size}" for name, size in served.dims.items()]
    parts += [f"{name} filled with {value:g}" for name, value in served.values.items()]
    if served.inputs_file:
        parts.append("the arrays of the profile's .npz")
    return "; ".join(parts) if parts else "the model's default inputs"


def profile_in_use(
    profile_job: int, profile: LatencyProfile, verify_jobs: list[JobView[BatchingVerifyJobResult]]
) -> tuple[LatencyProfile, str]:
    """The profile the predictions rest on, and a line naming it: the calibrated profile the
    newest succeeded Verify job of profile job `profile_job` stored, by the policy every Verify
    follows (optistudio.core.batching.verify_policy.profile_in_use), or the profile as
    measured when none did."""
    jobs = {job.id: job for job in verify_chain(profile_job, verify_jobs)}
    calibrated, refit = verify_policy.profile_in_use(
        profile_job, profile, [(job.id, _result(job).prediction) for job in jobs.values()]
    )
    if refit is None:
        return profile, f"Predictions rest on the profile from job #{profile_job}, as measured."
    newest = jobs[refit.job]
    prediction = refit.prediction
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
        line += f" The newest Verify (job #{newest.id}) did not move it: {prediction.not_adopted}"
    elif prediction.recalibrated is not None:
        before = prediction.at_realised or prediction.predicted
        line += (
            f" For that Verify's own run the refit moved the predicted p99 from "
            f"{three_digits(before.p99_ms)} to {three_digits(prediction.recalibrated.p99_ms)} ms "
            f"(measured {three_digits(_result(newest).measured.p99_ms)} ms)."
        )
    return calibrated, line


def verify_chain(
    profile_job: int, verify_jobs: list[JobView[BatchingVerifyJobResult]]
) -> list[JobView[BatchingVerifyJobResult]]:
    """The succeeded Verify jobs (`recent_jobs`, each with its result) that checked and
    refitted profile job `profile_job`, oldest first."""
    chain = [
        job
        for job in verify_jobs
        if job.succeeded
        and job.result is not None
        and job.result.prediction is not None
        and job.result.prediction.profile_job == profile_job
    ]
    return sorted(chain, key=lambda job: job.id)


def _result(job: JobView[BatchingVerifyJobResult]) -> BatchingVerifyJobResult:
    """The result of a job of `verify_chain` (which holds only jobs with one)."""
    assert job.result is not None
    return job.result


def before_run_line(predicted: LoadResult, band: Band) -> str:
    """What the Verify job predicted before it ran, at the offered rate on fresh arrivals."""
    return (
        f" Before it ran, at the offered rate: p99 {three_digits(predicted.p99_ms)} ms "
        f"(band {three_digits(band.p99_low_ms)}-{three_digits(band.p99_high_ms)})."
    )


def convergence_frame(
    profile_job: int, verify_jobs: list[JobView[BatchingVerifyJobResult]]
) -> pd.DataFrame:
    """One row per Verify of the profile, in order: its rate, the p99 (and band) predicted
    from the profile as refitted before it ran (on the run's own send times where stored), the
    p99 measured, and the p99 its own refit predicts for it. Converging refits bring the
    predicted p99 toward the measured one."""
    rows = []
    for job in verify_chain(profile_job, verify_jobs):
        result = _result(job)
        prediction: VerifyPrediction = result.prediction
        point = prediction.on_arrivals or prediction.predicted
        band = prediction.arrivals_band or prediction.band
        rows.append(
            {
                "verify": f"#{job.id}",
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


def band_verdict(predicted: LoadResult, band: Band, measured: LoadResult) -> tuple[str, bool]:
    """Whether the measured p99 falls inside the predicted band, and how wide the band is
    (its half-width as a share of the predicted p99); True when inside."""
    inside = band.holds_p99(measured.p99_ms)
    where = "inside" if inside else ("above" if measured.p99_ms > band.p99_high_ms else "below")
    bounds = f"{three_digits(band.p99_low_ms)}-{three_digits(band.p99_high_ms)}"
    return (
        f"Measured p99 {three_digits(measured.p99_ms)} ms lies {where} the predicted band "
        f"{bounds} ms (±{band.p99_width(predicted.p99_ms):.0%} of the predicted "
        f"{three_digits(predicted.p99_ms)} ms)." + served_error_line(band) + pace_line(band),
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
        f"Arrivals realised: {three_digits(realised)} req/s of the {offered:g} offered "
        f"({realised / offered - 1:+.0%})."
    )
    if short:
        line += (
            " The load generator fell behind its schedule (one Python thread cannot go faster "
            "here), so compare with the prediction at the realised rate, or verify at a lower one."
        )
    return line, short


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


def verify_table(frame: pd.DataFrame) -> pd.DataFrame:
    """`comparison_frame` as the page shows it: each figure by its name, the figures to three
    significant digits, the error in percent, "yes" / "no" for a measured figure inside the
    band, and "—" where a figure has no band (mean batch size, queue wait)."""
    inside = {True: "yes", False: "no"}
    shown = frame.assign(
        figure=[FIGURES[key] for key in frame["figure"]],
        inside=[None if pd.isna(v) else inside[bool(v)] for v in frame["inside"]],
    )
    for column in FIGURE_COLUMNS:
        if column in shown:
            shown[column] = [None if pd.isna(v) else three_digits(v) for v in shown[column]]
    return readable_frame(shown, numbers={"error": "{:.1%}"}, headers=TABLE_HEADERS)


def profile_mismatch(
    profile: LatencyProfile,
    batches: VerifyBatches | None,
    *,
    slowdown: float | None = None,
    p99s: tuple[float, float, float | None] | None = None,
) -> str | None:
    """Why measured and predicted may differ: the model ran more than RUNNER_DRIFT faster or
    slower during the verify run than the profile says (`slowdown`: as the Verify job measured
    it against the profile it rested on; else from its batches against `profile`). None when
    it did not, or for a verify job stored before batches were recorded. With `p99s`
    (predicted, measured, predicted at the run's speed or None) the note says whether the
    speed explains the gap's direction and size (optistudio.core.batching.verify_gap)."""
    if slowdown is None and (batches is None or not batches.runner):
        return None
    ratio = slowdown if slowdown is not None else slowdown_of(batches.runner, profile)  # type: ignore[union-attr]
    if p99s is not None:  # (predicted, measured, at the run's speed): the note follows them
        return speed_gap_note(ratio, p99s[0], p99s[1], at_run_speed_p99_ms=p99s[2])
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
