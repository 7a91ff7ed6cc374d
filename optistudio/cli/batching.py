"""`optistudio batching latency-profile|simulate|verify|recommend MODEL.onnx`: the batching tuner.

latency-profile
          times the model per batch size and the runtime's hand-back time per batch under load
          (added to every simulated batch), then the sizes on 2, 4, ... instances at once
          (--instance-counts), and predicts the given setting (--instances) from it;
simulate  predicts throughput and latency of a setting (from --profile FILE, or a fresh profile);
verify    serves the model with the real Pipeline under the load generator and measures;
recommend searches instances x max batch size x timeout under --p99-budget-ms at --rate (none:
          max rate; the instance counts the profile measured),
          keeping the budget with the model --margin percent slower than profiled (default 10).
Each prints one JSON object with --json: throughput, p50_ms, p99_ms and the settings; a
prediction also its band (p50_low_ms/p50_high_ms, p99_low_ms/p99_high_ms,
throughput_low/throughput_high: 1 %-99 % over runs as long as a --seconds Verify on the profile
resampled; its p99 stretched to hold the simulator's errors on the profile's own serving
probes, band.served_error_range and their median band.served_error; the paces its draws ran the model and the serving threads at, from the machine's speed
beside those probes and its inverse, band.paces; the share of draws whose queue kept growing,
band.saturated_share), a measurement its realised arrival rate (realised_rate) beside the offered one, and
verify with --profile whether the measured p99 falls inside the predicted band; with
--recalibrate OUT it also writes the profile refitted from the run's own batches
(optistudio.core.batching.recalibrate; a saturated run's refit is not adopted: OUT gets the
profile unchanged and `not_adopted` says why) and reports the predicted p99 at the verified rate
before and after the refit beside the measured one (`recalibrated`).
A prediction at a rate above the setting's ceiling says so in `overloaded` ("overloaded: ceiling
X req/s below the offered Y req/s; latency grows without bound") and has no latency figure: its
percentiles and their band are null (`optistudio.core.batching.overload`); `overloaded` is null
when the setting keeps up.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from optistudio.cli.args import add_input_flags, input_options, parse_int_list, resolved_inputs
from optistudio.cli.batching_store import (
    SAVE_HELP,
    probe_time_scale,
    profile_result,
    profile_spec,
    recorded,
    stored_model,
    verify_result,
    verify_spec,
)
from optistudio.cli.output import print_json
from optistudio.core.errors import InvalidSpec, describe_validation_error, first_line

ACTIONS = ("latency-profile", "simulate", "verify", "recommend")
FORMER_ACTIONS = {"profile": "latency-profile"}
"""A former action name -> today's: typed by people and scripts, still accepted."""
DEFAULT_MARGIN_PERCENT = (
    10.0  # optistudio.core.batching.tuner.DEFAULT_MARGIN; not imported, to start fast
)


def todays_action(name: str) -> str:
    """The action `name` stands for: itself, or today's name for a former one."""
    return FORMER_ACTIONS.get(name, name)


def add_batching_parser(commands: Any) -> None:
    """`batching ACTION MODEL` on the CLI's subcommands."""
    batching = commands.add_parser(
        "batching",
        help="latency-profile, simulate, verify and tune dynamic batching for a model",
    )
    batching.add_argument(
        "action",
        choices=ACTIONS,
        type=todays_action,
        help="what to do ('profile': the former name of latency-profile, still accepted)",
    )
    batching.add_argument(
        "model",
        type=Path,
        help="path to an .onnx file, or a stored model's id (latency-profile, recommend and verify then "
        "store their results)",
    )
    add_input_flags(batching, request=True)
    _add_runtime_flags(batching)
    _add_serving_flags(batching)
    _add_load_flags(batching)
    _add_recommend_flags(batching)
    _add_file_flags(batching)


def _add_runtime_flags(batching: argparse.ArgumentParser) -> None:
    """Where each instance runs: the backend, its threads, spin wait."""
    add = batching.add_argument
    add("--backend", default="onnxruntime")
    add(
        "--threads",
        type=int,
        help="intra-op threads per instance (default: the cores but one, shared out between "
        "instances; the spare core serves the requests)",
    )
    add(
        "--spin",
        action="store_true",
        help="let ONNX Runtime's idle threads spin (off: behind the pipeline they slow the "
        "serving threads and make the model's speed erratic)",
    )


def _add_serving_flags(batching: argparse.ArgumentParser) -> None:
    """The serving setting: max batch, timeout, eager cut, instances, queue."""
    add = batching.add_argument
    add(
        "--max-batch-size",
        type=int,
        help="most requests in one batch; latency-profile: the largest batch timed (default 8, as on "
        "the Batching page)",
    )
    add("--timeout-ms", type=float, default=2.0)
    add("--eager", type=int, help="send at once when this many requests wait")
    add("--preferred", type=parse_int_list, help="preferred batch sizes, e.g. 4,8")
    add("--instances", type=int, default=1, help="model instances (sessions) served")
    add(
        "--instance-counts",
        type=parse_int_list,
        help="latency-profile: instance counts to time at once, e.g. 1,2 (default: 1, 2, 4, ... up to "
        "the cores)",
    )
    add("--max-queue", type=int, default=1024)
    add(
        "--quick",
        action="store_true",
        help="latency-profile: serving probes at a quarter of their length, about a third of "
        "the time; the serving figures, and so the band, rest on fewer requests",
    )


def _add_load_flags(batching: argparse.ArgumentParser) -> None:
    """The load sent: its rate, arrival process, clients and length."""
    add = batching.add_argument
    add("--rate", type=float, help="arrival rate, requests/s (recommend: omit = max throughput)")
    add("--process", choices=("poisson", "constant", "closed"), default="poisson")
    add("--clients", type=int, default=0, help="closed loop: concurrent clients")
    add("--seconds", type=float, default=5.0, help="verify: how long to send")


def _add_recommend_flags(batching: argparse.ArgumentParser) -> None:
    """recommend's latency budget and its margin."""
    add = batching.add_argument
    add("--p99-budget-ms", type=float, help="recommend: the p99 latency budget")
    add(
        "--margin",
        type=float,
        default=DEFAULT_MARGIN_PERCENT,
        help="recommend: the budget must also hold with the model this many percent slower "
        "than profiled, the serving threads on its cores with it (default %(default)g; 0 "
        "trusts the profile exactly)",
    )


def _add_file_flags(batching: argparse.ArgumentParser) -> None:
    """Profiles read and written, the seed, storing, JSON output."""
    add = batching.add_argument
    add("--profile", type=Path, help="simulate/recommend/verify: a saved profile JSON")
    add("--out", type=Path, help="latency-profile: also write the profile JSON here")
    add(
        "--recalibrate",
        type=Path,
        metavar="OUT",
        help="verify with --profile: write the profile refitted from this run's batches here",
    )
    add("--seed", type=int, default=0)
    add("--save", action="store_true", help=SAVE_HELP)
    add("--json", action="store_true", help="print one JSON object")


def batching_settings(args: argparse.Namespace) -> Any:
    from optistudio.core.batching.settings import settings_from

    given = {"max_batch_size": args.max_batch_size} if args.max_batch_size is not None else {}
    values = {
        **given,  # none given: the settings' own default (DEFAULT_MAX_BATCH_SIZE)
        "timeout_ms": args.timeout_ms,
        "eager_threshold": args.eager,
        "preferred_batch_sizes": args.preferred or [],
        "instances": args.instances,
        "max_queue": args.max_queue,
    }
    return settings_from(values)


DEFAULT_RATE_SHARE = 0.7
"""Where `batching latency-profile` predicts without --rate: this share of the profile's ceiling."""


def command_batching(args: argparse.Namespace) -> int:
    settings = batching_settings(args)
    if args.process != "closed" and args.action in ("simulate", "verify") and not args.rate:
        raise InvalidSpec(
            "--rate is needed (requests per second) for an open-loop arrival process."
        )
    stored = stored_model(args)  # a model id: args.model becomes its file
    args.stored = stored if args.action != "simulate" else None
    payload = {
        "latency-profile": _profile_command,
        "simulate": _simulate_command,
        "verify": _verify_command,
        "recommend": _recommend_command,
    }[args.action](args, settings)
    payload["inputs"] = resolved_inputs(args)  # None: a saved profile, or nothing guessed
    if args.json:
        print_json(payload)
    else:
        _print_summary(payload)
    return 0


def _profile(args: argparse.Namespace, settings: Any, *, fresh: bool = False) -> Any:
    from pydantic import ValidationError

    from optistudio.core.batching.latency import LatencyProfile
    from optistudio.core.batching.latency_profile import measure_latency_profile

    if args.profile is not None and not fresh:
        try:
            return LatencyProfile.model_validate_json(args.profile.read_text())
        except (OSError, ValueError) as exc:
            problem = (
                describe_validation_error(exc)
                if isinstance(exc, ValidationError)
                else first_line(exc)
            )
            raise InvalidSpec(
                f"Cannot read the profile {str(args.profile)!r}: {problem}",
                hint="Write one with `optistudio batching latency-profile MODEL --out profile.json`.",
            ) from None
    inputs = input_options(args).model_inputs  # first: --free-dims sets args.model
    return measure_latency_profile(
        args.model,
        max_batch_size=settings.max_batch_size,
        target=_target(args),
        inputs=inputs,
        instances=args.instance_counts,
        probe_time_scale=probe_time_scale(args),
    )


def _target(args: argparse.Namespace) -> Any:
    """Where the command's model runs: its --backend, --threads and --spin."""
    from optistudio.core.backends.target import RunTarget

    return RunTarget(backend=args.backend, threads=args.threads, spin_wait=args.spin)


def _instances(profile: Any, settings: Any) -> dict[str, Any]:
    """What the profile knows of the instances: the counts measured, each one's slowdown, and
    how the served count is predicted when it was not measured."""
    return {
        "instance_counts": profile.instance_counts(),
        "instance_latency": [row.model_dump() for row in profile.instance_latency],
        "instances_note": profile.instances_note(settings.instances) or None,
        "batched_rewrite": profile.batched_rewrite or None,
        "batch_refused": profile.batch_refused or None,
        "quick_note": profile.quick_note() or None,
        "pace_note": profile.pace_note() or None,
    }


def _predict(
    args: argparse.Namespace, settings: Any, profile: Any, rate: float | None = None
) -> Any:
    """The simulator's prediction at `rate` (default --rate)."""
    from optistudio.core.batching.simulate import simulate

    return simulate(
        profile,
        settings,
        rate=rate if rate is not None else args.rate,
        process=args.process,
        clients=args.clients,
        seed=args.seed,
    )


def _band(args: argparse.Namespace, settings: Any, profile: Any, rate: float | None) -> Any:
    """The prediction's band for a Verify of --seconds at `rate`."""
    from optistudio.core.batching.simulate import simulate_band

    return simulate_band(
        profile,
        settings,
        rate=rate,
        process=args.process,
        clients=args.clients,
        seconds=args.seconds,
        seed=args.seed,
    )


def _payload(
    kind: str, settings: Any, result: Any, band: Any = None, **extra: Any
) -> dict[str, Any]:
    figures = result.model_dump()
    head = {"kind": kind}
    for name in ("throughput", "p50_ms", "p99_ms"):
        head[name] = figures.pop(name)
        if band is not None:
            stem = name.removesuffix("_ms")
            unit = "_ms" if name.endswith("_ms") else ""
            head[f"{stem}_low{unit}"] = getattr(band, f"{stem}_low{unit}")
            head[f"{stem}_high{unit}"] = getattr(band, f"{stem}_high{unit}")
    if band is not None:
        extra["band"] = band.model_dump()
    head["instances"] = settings.instances
    return {**head, "settings": settings.model_dump(), **figures, **extra}


def _predicted(
    args: argparse.Namespace, settings: Any, profile: Any, rate: float | None
) -> dict[str, Any]:
    """A prediction at `rate` with its band, as the flat figures of `_payload`."""
    result = _predict(args, settings, profile, rate)
    payload = _payload("predicted", settings, result, _band(args, settings, profile, rate))
    return _overloaded(payload, profile, settings, rate if args.process != "closed" else None)


def _overloaded(
    payload: dict[str, Any], profile: Any, settings: Any, rate: float | None
) -> dict[str, Any]:
    """`payload` with its `overloaded` sentence (None when the setting keeps up with `rate`);
    an overloaded prediction has no latency figure: they grow with the run's length, so each
    is null (never Infinity, never a p50 outside its own band)."""
    from optistudio.core.batching.overload import BAND_LATENCY_FIGURES, LATENCY_FIGURES, overload

    payload["overloaded"] = overload(profile, settings, rate)
    if payload["overloaded"]:
        bounds = ("p50_low_ms", "p50_high_ms", "p99_low_ms", "p99_high_ms")
        for name in (*LATENCY_FIGURES, *bounds):
            if name in payload:
                payload[name] = None
        for name in BAND_LATENCY_FIGURES if isinstance(payload.get("band"), dict) else ():
            payload["band"][name] = None
    return payload


def _profile_command(args: argparse.Namespace, settings: Any) -> dict[str, Any]:
    from optistudio.db.models import JobKind

    profile, stored = recorded(
        args.stored,
        JobKind.latency_profile,
        lambda: profile_spec(args, settings),
        lambda: _profile(args, settings, fresh=True),
        lambda measured: profile_result(measured, settings.max_batch_size),
    )
    if args.out is not None:
        args.out.write_text(profile.model_dump_json(indent=2))
    figures = _profile_figures(profile, settings)
    if args.process != "closed" and not args.rate:  # predict where a service would run
        args.rate = float(f"{DEFAULT_RATE_SHARE * figures['served_ceiling_throughput']:.3g}")
        figures["rate_note"] = (
            f"No --rate: predicted at {DEFAULT_RATE_SHARE:.0%} of the ceiling served through "
            f"the pipeline ({args.rate:g} req/s); give --rate for your own."
        )
    payload = _payload(
        "predicted",
        settings,
        _predict(args, settings, profile),
        _band(args, settings, profile, args.rate),
        rate=args.rate,
        **figures,
    )
    payload["stored"] = stored
    return _overloaded(payload, profile, settings, args.rate if args.process != "closed" else None)


def _profile_figures(profile: Any, settings: Any) -> dict[str, Any]:
    """What latency-profile prints of the profile it measured: its ceilings, the serving
    costs its probes measured (with their percentiles) and what it could not measure."""
    ceiling, best = profile.ceiling(settings.max_batch_size, instances=settings.instances)
    return {
        "profile": profile.model_dump(),
        "ceiling_throughput": ceiling,
        "ceiling_batch_size": best,
        "handoff_ms": profile.handoff_ms,
        "served_extra_ms": profile.served_extra_ms,
        "served_extra_load": [list(point) for point in profile.served_extra_load],
        "request_ms": profile.request_ms or None,
        "unmeasured": profile.unmeasured,
        **_instances(profile, settings),
        "served_ceiling_throughput": profile.ceiling(
            settings.max_batch_size, with_handoff=True, instances=settings.instances
        )[0],
        "serving_delay_p50_ms": _percentile(profile.serving_delays_ms, 50),
        "serving_delay_p99_ms": _percentile(profile.serving_delays_ms, 99),
        "serving_delays_rate": profile.light_rate(),
        "timed_rate": profile.timed_rate,
        "timed_extra_ms": profile.timed_extra_ms,
        "timed_batch": profile.timed_batch,
        "timed_delay_p50_ms": _percentile(profile.timed_delays_ms, 50),
        "timed_delay_p99_ms": _percentile(profile.timed_delays_ms, 99),
        "timed_calls": len(profile.timed_calls),
        "timed_call_extra_p99_ms": _percentile([extra for _, extra in profile.timed_calls], 99),
        "timed_load": [
            {
                "rate": rate,
                "extra_ms": extra,
                "mean_batch": batch,
                "p50_ms": _percentile(drawn, 50),
                "p99_ms": _percentile(drawn, 99),
            }
            for rate, extra, drawn, batch in profile.timed_load
        ],
        "serving_delays_load": [
            {"rate": rate, "p50_ms": _percentile(drawn, 50), "p99_ms": _percentile(drawn, 99)}
            for rate, drawn in profile.serving_delays_load
        ],
    }


def _percentile(values: list[float], q: float) -> float | None:
    """The q-th percentile of measured delays (never below 0, as the simulator adds them), or
    None for a profile without them."""
    import numpy as np

    return float(np.percentile(np.clip(values, 0, None), q)) if values else None


def _simulate_command(args: argparse.Namespace, settings: Any) -> dict[str, Any]:
    profile = _profile(args, settings)
    return _predicted(args, settings, profile, args.rate) | _instances(profile, settings)


def _verify_command(args: argparse.Namespace, settings: Any) -> dict[str, Any]:
    from optistudio.core.batching.results import p99_halves
    from optistudio.core.batching.verify import measure_load

    if args.recalibrate is not None and args.profile is None:
        raise InvalidSpec(
            "--recalibrate refits a saved profile: give it with --profile.",
            hint="Write one with `optistudio batching latency-profile MODEL --out profile.json`.",
        )
    from optistudio.db.models import JobKind

    inputs = input_options(args).model_inputs  # first: --free-dims sets args.model
    run, stored = recorded(
        args.stored,
        JobKind.batching_verify,
        lambda: verify_spec(args, settings),
        lambda: measure_load(
            args.model,
            settings,
            rate=args.rate,
            process=args.process,
            clients=args.clients,
            seconds=args.seconds,
            target=_target(args),
            inputs=inputs,
            seed=args.seed,
        ),
        lambda measured: verify_result(measured, settings),
    )
    extra: dict[str, Any] = {"errors": run.errors, "p99_halves_ms": p99_halves(run.latency_ms)}
    extra["stored"] = stored
    if run.note:
        extra["batched_rewrite"] = run.note
    if args.profile is not None:
        profile = _profile(args, settings)
        extra |= _judged(args, settings, profile, run.result)
        extra["instances_note"] = profile.instances_note(settings.instances) or None
        if args.recalibrate is not None:
            extra["recalibrated"] = _recalibrated(args, settings, profile, run)
    return _payload("measured", settings, run.result, **extra)


def _recalibrated(
    args: argparse.Namespace, settings: Any, profile: Any, run: Any
) -> dict[str, Any]:
    """Refit the profile from the run's batches, write it to --recalibrate, and say how the
    prediction at the verified rate moved against what was measured."""
    from optistudio.core.batching.recalibrate import recalibrate, saturated_refit

    rate = args.rate if args.process != "closed" else None
    offered = f"{args.rate:g} req/s" if rate else f"{args.clients} clients"
    calibrated = recalibrate(
        profile, run, verify=f"the verify run at {offered}", timeout_ms=settings.timeout_ms
    )
    not_adopted = saturated_refit(run.result, calibrated, profile)
    if not_adopted:  # the profile is written back unchanged, and the JSON says why
        calibrated = profile
    args.recalibrate.write_text(calibrated.model_dump_json(indent=2))
    measured = run.result.p99_ms
    before = _predict(args, settings, profile, rate).p99_ms
    after = _predict(args, settings, calibrated, rate).p99_ms
    return {
        "path": str(args.recalibrate),
        "calibration": (
            calibrated.calibration.model_dump(mode="json") if calibrated.calibration else None
        ),
        "not_adopted": not_adopted,
        "measured_p99_ms": measured,
        "p99_before_ms": before,
        "p99_after_ms": after,
        "p99_error_before": (before - measured) / measured,
        "p99_error_after": (after - measured) / measured,
    }


def _judged(args: argparse.Namespace, settings: Any, profile: Any, measured: Any) -> dict[str, Any]:
    """The prediction at the offered rate and at the realised one, and whether the measured p99
    falls inside each band (with the band's half-width as a share of the predicted p99)."""
    judged: dict[str, Any] = {}
    rates = {"predicted": args.rate, "predicted_at_realised": measured.realised_rate}
    for key, rate in rates.items():
        if rate is None and args.process != "closed":
            continue
        predicted = _predicted(args, settings, profile, rate)
        low, high = predicted["p99_low_ms"], predicted["p99_high_ms"]
        if not predicted["overloaded"]:  # overloaded: no band to hold a p99
            predicted["p99_in_band"] = low <= measured.p99_ms <= high
            predicted["p99_band_width"] = (high - low) / 2 / predicted["p99_ms"]
        judged[key] = predicted
        if args.process == "closed":
            break
    return judged


def _recommend_command(args: argparse.Namespace, settings: Any) -> dict[str, Any]:
    from optistudio.core.batching.tuner import recommend
    from optistudio.db.models import JobKind

    if args.p99_budget_ms is None:
        raise InvalidSpec("recommend needs --p99-budget-ms (the p99 latency you can accept).")
    if not 0 <= args.margin < 100:
        raise InvalidSpec(
            f"--margin is a percentage from 0 to below 100 (10 = the model 10 % slower), got "
            f"{args.margin:g}."
        )

    def advised() -> tuple[Any, Any]:
        profile = _profile(args, settings)
        return profile, recommend(
            profile,
            p99_budget_ms=args.p99_budget_ms,
            rate=args.rate,
            base=settings,
            max_batch_size=settings.max_batch_size,
            seed=args.seed,
            margin=args.margin / 100,
        )

    (profile, advice), stored = recorded(
        args.stored,
        JobKind.latency_profile,
        lambda: profile_spec(args, settings),
        advised,
        lambda measured: profile_result(
            measured[0],
            settings.max_batch_size,
            measured[1],
            budget_ms=args.p99_budget_ms,
            rate=args.rate,
        ),
    )
    payload = _payload(
        "predicted",
        advice.settings,
        advice.predicted,
        feasible=advice.feasible,
        margin=advice.margin,
        p99_slower_ms=_finite(advice.p99_slower_ms),
        reason=advice.reason,
        candidates=[_candidate(c) for c in advice.candidates],
        **_instances(profile, advice.settings),
        stored=stored,
    )
    return _overloaded(
        payload, profile, advice.settings, args.rate if args.process != "closed" else None
    )


def _candidate(candidate: Any) -> dict[str, Any]:
    """A tried setting as JSON (strict: a queue that would not keep up with the model slower
    is `slower_saturated`, its p99 null, not Infinity)."""
    row = candidate.model_dump(exclude={"predicted"})
    row["slower_saturated"] = row["p99_slower_ms"] == float("inf")
    row["p99_slower_ms"] = _finite(row["p99_slower_ms"])
    return row | {
        "throughput": candidate.predicted.throughput,
        "p99_ms": candidate.predicted.p99_ms,
    }


def _finite(value: float | None) -> float | None:
    return None if value is None or value == float("inf") else value


def _print_summary(payload: dict[str, Any]) -> None:
    """The payload in words, a section at a time (`SUMMARY_SECTIONS`)."""
    for section in SUMMARY_SECTIONS:
        section(payload)


def _print_measured(payload: dict[str, Any]) -> None:
    """Notes on what ran, then throughput and latency, or the overload that left none."""
    for said in ("batched_rewrite", "quick_note", "pace_note", "rate_note"):
        if payload.get(said):
            print(payload[said])
    if payload.get("overloaded"):
        print(
            f"{payload['kind']}: {payload['overloaded']} ({payload['throughput']:.1f} req/s "
            f"served, mean batch {payload['mean_batch_size']:.2f})"
        )
    else:
        print(
            f"{payload['kind']}: {payload['throughput']:.1f} req/s, p50 {payload['p50_ms']:.2f} "
            f"ms, p99 {payload['p99_ms']:.2f} ms, mean batch {payload['mean_batch_size']:.2f}, "
            f"queue {payload['mean_queue_ms']:.2f} ms + compute {payload['mean_compute_ms']:.2f} ms"
        )


def _print_band(payload: dict[str, Any]) -> None:
    """The predicted band, the arrivals realised, and whether the measured p99 fell in the band."""
    if payload.get("p99_low_ms") is not None:
        print(
            f"band ({payload['band']['level']:.0%} of {payload['band']['draws']} simulated "
            f"runs): p50 {payload['p50_low_ms']:.2f}-{payload['p50_high_ms']:.2f} ms, p99 "
            f"{payload['p99_low_ms']:.2f}-{payload['p99_high_ms']:.2f} ms, throughput "
            f"{payload['throughput_low']:.1f}-{payload['throughput_high']:.1f} req/s"
        )
        error = payload["band"].get("served_error")
        if error is not None:
            low, high = payload["band"].get("served_error_range") or (error, error)
            span = f"x{low:.2f}" if f"{low:.2f}" == f"{high:.2f}" else f"x{low:.2f}-{high:.2f}"
            print(
                f"  its p99 also spans the prediction {span}: the profile's own serving "
                "probes measured that over what the simulator predicted for them"
            )
        paces = payload["band"].get("paces")
        if paces and paces[1] > paces[0]:
            print(
                f"  its draws ran the model and its serving threads at {paces[0]:.2f}-"
                f"{paces[1]:.2f}x their profiled time: "
                "the machine's speed beside the profile's own serving probes, either way of "
                "the profile's own timings"
            )
        share = payload["band"].get("saturated_share")
        if share:
            draws = payload["band"]["draws"]
            print(
                f"  in {round(share * draws)} of its {draws} draws the queue kept growing "
                "through the run: at the slower paces this rate is past the ceiling, and the "
                "band's top is that queue's wait"
            )
    if payload.get("realised_rate") and payload.get("offered_rate"):
        print(
            f"arrivals: {payload['realised_rate']:.1f} req/s realised of "
            f"{payload['offered_rate']:g} offered"
        )
    for key, which in (("predicted", "offered"), ("predicted_at_realised", "realised")):
        if isinstance(payload.get(key), dict) and "p99_in_band" in payload[key]:
            where = "inside" if payload[key]["p99_in_band"] else "outside"
            print(
                f"measured p99 {payload['p99_ms']:.2f} ms is {where} the band "
                f"{payload[key]['p99_low_ms']:.2f}-{payload[key]['p99_high_ms']:.2f} ms "
                f"(predicted at the {which} rate, +-{payload[key]['p99_band_width']:.0%})"
            )


def _print_settings(payload: dict[str, Any]) -> None:
    """The setting, its recalibration, a saturation warning and the advice's reason."""
    settings = payload["settings"]
    print(
        f"settings: max batch {settings['max_batch_size']}, timeout {settings['timeout_ms']:g} ms, "
        f"instances {settings['instances']}"
    )
    if isinstance(payload.get("recalibrated"), dict):
        moved = payload["recalibrated"]
        print(
            f"recalibrated profile written to {moved['path']}: predicted p99 "
            f"{moved['p99_before_ms']:.2f} -> {moved['p99_after_ms']:.2f} ms against the "
            f"measured {moved['measured_p99_ms']:.2f} ms"
        )
    if payload.get("saturated") and not payload.get("overloaded"):
        print("warning: arrivals outpace service at this rate (the queue keeps growing)")
    if "reason" in payload:
        print(payload["reason"])


def _print_capacity(payload: dict[str, Any]) -> None:
    """The ceiling, instances timed at once, and the per-batch hand-back."""
    if "ceiling_throughput" in payload:
        print(
            f"ceiling: {payload['ceiling_throughput']:.1f} req/s at batch "
            f"{payload['ceiling_batch_size']} on {payload['instances']} instance(s)"
        )
    for row in payload.get("instance_latency") or []:
        slowdown = ", ".join(f"{f:.2f}x" for f in row["slowdown"])
        print(
            f"{row['instances']} instances at once, {row['threads']} thread(s) each: per batch "
            f"size {slowdown} one instance's latency"
        )
    for key in ("instances_note", "batch_refused"):
        if payload.get(key):
            print(payload[key])
    if payload.get("handoff_ms") is not None:
        print(
            f"per-batch hand-back under load: {payload['handoff_ms']:.2f} ms, "
            "included in predictions"
        )


def _print_serving(payload: dict[str, Any]) -> None:
    """What serving adds to the model's own time: runner calls, answers, machinery."""
    if payload.get("serving_delay_p50_ms") is not None:
        print(
            f"served at a light rate: runner calls {payload['served_extra_ms']:.2f} ms slower "
            f"than profiled, answers {payload['serving_delay_p50_ms']:.2f} ms (p99 "
            f"{payload['serving_delay_p99_ms']:.2f} ms) after their batch, included in predictions"
        )
    if len(payload.get("served_extra_load") or []) > 1:
        rate, extra = payload["served_extra_load"][-1]
        print(
            f"served at {rate:.1f} req/s: runner calls {extra:.2f} ms slower than profiled; "
            f"served ceiling {payload['served_ceiling_throughput']:.1f} req/s"
        )
    for point in payload.get("serving_delays_load") or []:
        print(
            f"served at {point['rate']:.1f} req/s: answers {point['p50_ms']:.2f} ms (p99 "
            f"{point['p99_ms']:.2f} ms) after their batch"
        )
    if payload.get("timed_extra_ms") is not None and payload.get("timed_delay_p50_ms") is not None:
        print(
            f"served at {payload['timed_rate']:.1f} req/s with a batching timeout: runner calls "
            f"{payload['timed_extra_ms']:.2f} ms slower than profiled, answers "
            f"{payload['timed_delay_p50_ms']:.2f} ms (p99 {payload['timed_delay_p99_ms']:.2f} ms) "
            "after their batch, used for settings with a timeout"
        )
    for point in payload.get("timed_load") or []:
        print(
            f"served at {point['rate']:.1f} req/s with a batching timeout: runner calls "
            f"{point['extra_ms']:.2f} ms slower than profiled, answers {point['p50_ms']:.2f} ms "
            f"(p99 {point['p99_ms']:.2f} ms) after their batch"
        )
    if payload.get("timed_calls"):
        print(
            f"runner calls with a batching timeout: {payload['timed_calls']} kept, their extra "
            f"{payload['timed_call_extra_p99_ms']:.2f} ms at p99, each call of a setting with a "
            "timeout drawn from that spread"
        )
    if payload.get("request_ms"):
        print(
            f"serving machinery with no model: {payload['request_ms'] * 1000:.0f} us per request "
            f"({1000 / payload['request_ms']:.0f} req/s at most)"
        )


def _print_stored(payload: dict[str, Any]) -> None:
    """What could not be measured, and where the result was stored."""
    for field, why in (payload.get("unmeasured") or {}).items():
        print(f"{field}: {why}")
    if payload.get("stored"):
        ids = payload["stored"]
        print(
            f"stored as job #{ids['job_id']} on model #{ids['model_id']}: "
            f"`optistudio export {ids['model_id']}` serves the newest verified setting, else "
            "the recommended one"
        )


SUMMARY_SECTIONS = (
    _print_measured,
    _print_band,
    _print_settings,
    _print_capacity,
    _print_serving,
    _print_stored,
)
