"""`optistudio batching ...`: one JSON object per action, and clear refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli import optistudio

from optistudio.core.batching.latency import LatencyProfile

SETTINGS = ["--max-batch-size", "4", "--timeout-ms", "1"]


@pytest.mark.timing
def test_profile_then_simulate_and_recommend_from_the_saved_profile(
    tiny_model: Path, tmp_path: Path
) -> None:
    profile_file = tmp_path / "profile.json"
    run = optistudio(
        "batching", "latency-profile", str(tiny_model), *SETTINGS, "--rate", "500", "--quick",
        "--instance-counts", "1,2", "--out", str(profile_file), "--json", data_dir=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    profiled = json.loads(run.stdout)
    assert profiled["profile"]["batch_sizes"] == [1, 2, 4]
    assert profiled["instances"] == 1 and profiled["instance_counts"] == [1, 2]
    assert [row["instances"] for row in profiled["instance_latency"]] == [2]
    assert all(f > 0 for f in profiled["instance_latency"][0]["slowdown"])
    assert profiled["ceiling_throughput"] > 0 and profile_file.exists()
    # --quick: shortened serving probes, said in the output and kept in the saved profile
    assert "A quick profile" in profiled["quick_note"]
    saved = LatencyProfile.model_validate_json(profile_file.read_text())
    assert saved.probe_time_scale == profiled["profile"]["probe_time_scale"] < 1
    # the per-batch cost, also in the saved profile, or absent with the reason
    assert (profiled["handoff_ms"] is None) == ("handoff_ms" in profiled["unmeasured"])
    assert profiled["handoff_ms"] is None or profiled["handoff_ms"] >= 0
    assert profiled["profile"]["handoff_ms"] == profiled["handoff_ms"]
    assert profiled["served_extra_ms"] >= 0  # what serving at a light rate costs on top
    assert 0 <= profiled["serving_delay_p50_ms"] <= profiled["serving_delay_p99_ms"]
    assert profiled["serving_delays_rate"] > 0  # the light probe's rate, and any heavier one's
    # what serving with a batching timeout costs, from the timer probe (max batch 4 waits on it)
    assert profiled["timed_rate"] > 0 and profiled["timed_extra_ms"] >= 0
    assert 0 <= profiled["timed_delay_p50_ms"] <= profiled["timed_delay_p99_ms"]
    assert profiled["timed_calls"] > 0 and profiled["timed_call_extra_p99_ms"] is not None
    for point in profiled["timed_load"]:  # with batches that fill, where that probe kept up
        assert point["rate"] > profiled["timed_rate"] and point["extra_ms"] >= 0
        assert 0 <= point["p50_ms"] <= point["p99_ms"]
    for point in profiled["serving_delays_load"]:
        assert point["rate"] > profiled["serving_delays_rate"]
        assert 0 <= point["p50_ms"] <= point["p99_ms"]
    # The serving machinery with no model: a pace, or absent with the reason (a fast CPU keeps
    # up with every rate the probe sends), never both and never neither.
    unmeasured = profiled["unmeasured"]
    assert (profiled["request_ms"] is None) == ("request_ms" in unmeasured), unmeasured
    assert profiled["profile"]["unmeasured"] == unmeasured
    cap = 1000 / profiled["request_ms"] if profiled["request_ms"] else float("inf")
    assert 0 < profiled["served_ceiling_throughput"] <= cap + 1e-6

    # well below what the runtime was measured to serve here (two test workers share 2 cores)
    rate = round(min(500.0, 0.4 * profiled["served_ceiling_throughput"]), 1)
    run = optistudio(
        "batching", "simulate", str(tiny_model), *SETTINGS, "--rate", str(rate),
        "--profile", str(profile_file), "--json", data_dir=tmp_path,
    )  # fmt: skip
    predicted = json.loads(run.stdout)
    assert predicted["kind"] == "predicted" and predicted["settings"]["max_batch_size"] == 4
    assert predicted["instances"] == 1 and predicted["batched_rewrite"] is None  # a free batch
    assert predicted["throughput"] == pytest.approx(rate, rel=0.05)
    assert predicted["p50_ms"] <= predicted["p99_ms"]
    for figure in ("p50_ms", "p99_ms", "throughput"):  # the band beside each point
        stem, unit = figure.removesuffix("_ms"), "_ms" if figure.endswith("_ms") else ""
        low, high = predicted[f"{stem}_low{unit}"], predicted[f"{stem}_high{unit}"]
        assert 0 < low <= high, figure
    assert predicted["p99_low_ms"] <= predicted["p99_ms"] * 1.2
    assert predicted["p99_high_ms"] >= predicted["p99_ms"] * 0.8
    assert predicted["band"]["draws"] >= 2 and predicted["band"]["seconds"] == 5.0
    assert predicted["offered_rate"] == rate and predicted["realised_rate"] > 0

    # A budget the profiled settings meet with room to spare: the serving probe measured this
    # machine's delays under whatever else runs here (CI runs two test workers on two cores).
    budget = max(50.0, 3 * predicted["p99_high_ms"])
    run = optistudio(
        "batching", "recommend", str(tiny_model), *SETTINGS, "--rate", str(rate),
        "--p99-budget-ms", f"{budget:.1f}", "--profile", str(profile_file), "--json",
        data_dir=tmp_path,
    )  # fmt: skip
    advice = json.loads(run.stdout)
    assert advice["feasible"] and advice["p99_ms"] <= budget and advice["candidates"]
    assert advice["margin"] == 0.1  # the budget holds with the model 10 % slower too
    counts = {c["instances"] for c in advice["candidates"]}  # the counts profiled, but one
    assert 1 in counts and counts <= {1, 2}  # that fills every core here (and says so)
    assert 2 in counts or "2 instances were not searched" in advice["reason"]
    chosen = [c for c in advice["candidates"] if c["feasible"]]
    assert chosen and all(c["p99_slower_ms"] <= budget for c in chosen)


def test_a_profile_without_a_rate_predicts_at_a_stated_share_of_its_ceiling(
    tiny_model: Path, tmp_path: Path
) -> None:
    run = optistudio(
        "batching", "latency-profile", str(tiny_model), *SETTINGS, "--instance-counts", "1",
        "--json", data_dir=tmp_path,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    profiled = json.loads(run.stdout)
    # of what the pipeline serves, not of the bare runs (a small model's are 20x faster)
    served = profiled["served_ceiling_throughput"]
    assert profiled["rate"] == pytest.approx(0.7 * served, rel=0.01)
    assert "No --rate: predicted at 70% of the ceiling served through" in profiled["rate_note"]
    assert profiled["throughput"] > 0 and not profiled.get("overloaded")
    assert profiled["quick_note"] is None and profiled["profile"]["probe_time_scale"] == 1
    pace = profiled["profile"]["environment"]["machine_pace"]  # read before and after
    assert pace["windows"] >= 2 and (profiled["pace_note"] is None) is (pace["slow_share"] <= 0.05)


def test_simulate_without_a_rate_says_it_needs_one(tiny_model: Path, tmp_path: Path) -> None:
    run = optistudio(
        "batching", "simulate", str(tiny_model), *SETTINGS, "--json", data_dir=tmp_path
    )

    assert run.returncode == 2 and "--rate is needed" in run.stdout + run.stderr


def test_cli_margin_default_is_the_tuners() -> None:
    from optistudio.cli.batching import DEFAULT_MARGIN_PERCENT
    from optistudio.core.batching.tuner import DEFAULT_MARGIN

    assert DEFAULT_MARGIN_PERCENT == DEFAULT_MARGIN * 100


def test_verify_measures_the_real_pipeline(tiny_model: Path, tmp_path: Path) -> None:
    profile_file = tmp_path / "profile.json"
    optistudio(
        "batching", "latency-profile", str(tiny_model), *SETTINGS, "--rate", "300", "--quick",
        "--out", str(profile_file), "--json", data_dir=tmp_path,
    )  # fmt: skip
    run = optistudio(
        "batching", "verify", str(tiny_model), *SETTINGS, "--rate", "300", "--seconds", "1",
        "--profile", str(profile_file), "--json", data_dir=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    measured = json.loads(run.stdout)
    assert measured["kind"] == "measured" and measured["completed"] > 250
    assert measured["offered_rate"] == 300 and measured["realised_rate"] > 0  # what was sent
    for key, rate in (("predicted", 300), ("predicted_at_realised", measured["realised_rate"])):
        judged = measured[key]  # each prediction judged by its band
        assert judged["offered_rate"] == pytest.approx(rate)
        assert judged["p99_low_ms"] <= judged["p99_high_ms"]
        inside = judged["p99_low_ms"] <= measured["p99_ms"] <= judged["p99_high_ms"]
        assert judged["p99_in_band"] is inside and judged["p99_band_width"] >= 0
    assert measured["failed"] == 0 and measured["mean_batch_size"] >= 1
    first, second = measured["p99_halves_ms"]  # how settled the measured tail is
    assert 0 < min(first, second) <= measured["p99_ms"] <= max(first, second) * 1.5


def test_verify_recalibrates_the_profile_from_its_own_batches(
    tiny_model: Path, tmp_path: Path
) -> None:
    profile_file, calibrated_file = tmp_path / "profile.json", tmp_path / "calibrated.json"
    optistudio(
        "batching", "latency-profile", str(tiny_model), *SETTINGS, "--rate", "200", "--quick",
        "--out", str(profile_file), "--json", data_dir=tmp_path,
    )  # fmt: skip
    run = optistudio(
        "batching", "verify", str(tiny_model), *SETTINGS, "--rate", "100", "--seconds", "1",
        "--profile", str(profile_file), "--recalibrate", str(calibrated_file), "--json",
        data_dir=tmp_path,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    moved = json.loads(run.stdout)["recalibrated"]
    calibrated = LatencyProfile.model_validate_json(calibrated_file.read_text())
    assert calibrated.calibration is not None and calibrated.calibration.batches > 0
    assert moved["path"] == str(calibrated_file)
    assert moved["calibration"]["verify"] == "the verify run at 100 req/s"
    assert moved["not_adopted"] is None  # far below the knee: the refit is adopted
    assert set(moved["calibration"]["p50_moved"]) == {str(b) for b in calibrated.batch_sizes}
    assert moved["measured_p99_ms"] == json.loads(run.stdout)["p99_ms"]
    for when in ("before", "after"):
        error = (moved[f"p99_{when}_ms"] - moved["measured_p99_ms"]) / moved["measured_p99_ms"]
        assert moved[f"p99_error_{when}"] == pytest.approx(error)


def test_recalibrate_needs_a_saved_profile(tiny_model: Path, tmp_path: Path) -> None:
    run = optistudio(
        "batching", "verify", str(tiny_model), *SETTINGS, "--rate", "50", "--seconds", "0.2",
        "--recalibrate", str(tmp_path / "out.json"), "--json", data_dir=tmp_path,
    )  # fmt: skip
    assert run.returncode != 0
    assert "--profile" in run.stderr + run.stdout
    assert not (tmp_path / "out.json").exists()


def test_model_without_batch_dim_is_refused_with_why(make_model, tmp_path: Path) -> None:
    run = optistudio(
        "batching", "verify", str(make_model(batch=2)), "--rate", "10", data_dir=tmp_path
    )
    assert run.returncode == 2
    # said by the input check (batch 1 cannot be built) or by the batching's own check
    said = ("fixed batch of 2", "fixed first dimension of 2")
    assert any(s in run.stderr for s in said) and "Traceback" not in run.stderr


def test_a_margin_out_of_range_is_refused_before_profiling(
    tiny_model: Path, tmp_path: Path
) -> None:
    run = optistudio(
        "batching", "recommend", str(tiny_model), "--p99-budget-ms", "50", "--margin", "150",
        data_dir=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2 and "--margin is a percentage" in run.stderr
    assert "Traceback" not in run.stderr


def test_settings_out_of_range_are_named(tiny_model: Path, tmp_path: Path) -> None:
    run = optistudio(
        "batching", "simulate", str(tiny_model), "--max-batch-size", "0", "--rate", "10",
        data_dir=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2 and "max_batch_size" in run.stderr


def test_a_broken_profile_file_is_refused_naming_what_is_wrong(
    tiny_model: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "profile.json"  # delays under load with no light set to mix them with
    broken.write_text(
        json.dumps({"batch_sizes": [1], "mean_ms": [1.0], "serving_delays_load": [[50, [1.0]]]})
    )
    run = optistudio(
        "batching", "simulate", str(tiny_model), *SETTINGS, "--rate", "20",
        "--profile", str(broken), "--json", data_dir=tmp_path,
    )  # fmt: skip

    assert run.returncode == 2
    error = json.loads(run.stdout)["error"]
    assert "serving_delays_load needs the light probe's rate and delays" in error["message"]
    assert "batching latency-profile MODEL --out" in error["hint"] and broken.exists()


def test_simulate_says_when_its_band_holds_the_served_probes_error_and_paces(
    tiny_model: Path, tmp_path: Path
) -> None:
    from optistudio.core.batching.latency import ServedCheck

    check = ServedCheck(
        rate=300, timeout_ms=2, max_batch_size=4, requests=500, measured_p99_ms=6.0,
        simulated_p99_ms=4.0,
    )  # fmt: skip
    profile = LatencyProfile(
        batch_sizes=[1, 2, 4], mean_ms=[0.5, 0.7, 1.1], served_checks=[check],
        probe_speeds=[1.1, 0.95],
    )  # fmt: skip
    profile_file = tmp_path / "profile.json"
    profile_file.write_text(profile.model_dump_json())
    args = ("batching", "simulate", str(tiny_model), "--profile", str(profile_file))
    timed = (*args, "--max-batch-size", "4", "--timeout-ms", "2", "--rate", "500")

    printed = optistudio(*timed, data_dir=tmp_path)
    as_json = json.loads(optistudio(*timed, "--json", data_dir=tmp_path).stdout)

    assert printed.returncode == 0, printed.stderr
    assert "its p99 also spans the prediction x1.50" in printed.stdout
    assert as_json["band"]["served_error"] == 1.5
    assert "its draws ran the model and its serving threads at 0.91-1.10x" in printed.stdout
    assert as_json["band"]["paces"] == pytest.approx([1 / 1.1, 1.1])  # 1.1's inverse below 0.95
    assert as_json["p99_high_ms"] == as_json["band"]["p99_high_ms"]
    assert as_json["band"]["saturated_share"] == 0.0  # 500 req/s, far below its ceiling
    assert "the queue kept growing" not in printed.stdout


def test_simulate_says_in_how_many_draws_the_queue_kept_growing(
    tiny_model: Path, tmp_path: Path
) -> None:
    # 1 ms a batch of 8: 8,000 req/s at most; at 7,000 only the draws at 1.3x cannot keep up
    profile = LatencyProfile(batch_sizes=[1, 8], mean_ms=[0.5, 1.0], probe_speeds=[1.3])
    profile_file = tmp_path / "profile.json"
    profile_file.write_text(profile.model_dump_json())
    args = (
        "batching", "simulate", str(tiny_model), "--profile", str(profile_file),
        "--max-batch-size", "8", "--timeout-ms", "0", "--rate", "7000",
    )  # fmt: skip

    printed = optistudio(*args, data_dir=tmp_path)
    band = json.loads(optistudio(*args, "--json", data_dir=tmp_path).stdout)["band"]

    assert printed.returncode == 0, printed.stderr
    assert 0 < band["saturated_share"] < 1
    growing = round(band["saturated_share"] * band["draws"])
    assert f"in {growing} of its {band['draws']} draws the queue kept growing" in printed.stdout
