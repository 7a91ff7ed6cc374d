"""An overloaded what-if on the CLI: one sentence, and no latency figure outside its band."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_cli import optistudio

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.tuner import capacity

SLOW = LatencyProfile(batch_sizes=[1, 2, 4], mean_ms=[200.0, 360.0, 700.0])
"""A model of about 5.7 req/s at batch 4: the ceilings of the issue's models (2-15 req/s)."""
SETTINGS = ["--max-batch-size", "4", "--timeout-ms", "1"]


@pytest.fixture
def slow_profile(tmp_path: Path) -> Path:
    path = tmp_path / "profile.json"
    path.write_text(SLOW.model_dump_json())
    return path


def _simulate(model: Path, profile: Path, rate: str, tmp_path: Path, *more: str) -> object:
    return optistudio(
        "batching", "simulate", str(model), *SETTINGS, "--rate", rate, "--profile",
        str(profile), *more, data_dir=tmp_path,
    )  # fmt: skip


def test_an_overloaded_simulate_says_so_and_gives_no_percentile(
    tiny_model: Path, slow_profile: Path, tmp_path: Path
) -> None:
    ceiling = capacity(SLOW, BatchingSettings(max_batch_size=4, timeout_ms=1))

    run = _simulate(tiny_model, slow_profile, "20", tmp_path, "--json")

    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout, parse_constant=pytest.fail)  # strict: no Infinity/NaN
    assert payload["overloaded"] == (
        f"overloaded: ceiling {ceiling:.3g} req/s below the offered 20 req/s; "
        "latency grows without bound"
    )
    figures = ("p50_ms", "p90_ms", "p99_ms", "mean_ms", "p50_low_ms", "p99_high_ms")
    assert all(payload[name] is None for name in figures)
    assert payload["band"]["p50_ms"] is None and payload["band"]["p99_low_ms"] is None
    assert 0 < payload["throughput"] <= ceiling * 1.05  # what is served: the ceiling
    assert payload["saturated"] is True


def test_the_overloaded_summary_prints_the_sentence_and_no_p50(
    tiny_model: Path, slow_profile: Path, tmp_path: Path
) -> None:
    run = _simulate(tiny_model, slow_profile, "20", tmp_path)

    assert run.returncode == 0, run.stderr
    assert "latency grows without bound" in run.stdout
    assert "p50" not in run.stdout and "p99" not in run.stdout


def test_a_rate_the_setting_keeps_up_with_has_its_percentiles_inside_the_band(
    tiny_model: Path, slow_profile: Path, tmp_path: Path
) -> None:
    run = _simulate(tiny_model, slow_profile, "2", tmp_path, "--json")

    payload = json.loads(run.stdout)
    assert payload["overloaded"] is None
    assert math.isfinite(payload["p50_ms"]) and payload["p50_low_ms"] <= payload["p50_high_ms"]


def test_recommend_past_every_ceiling_is_overloaded_too(
    tiny_model: Path, slow_profile: Path, tmp_path: Path
) -> None:
    run = optistudio(
        "batching", "recommend", str(tiny_model), *SETTINGS, "--rate", "50",
        "--p99-budget-ms", "1000", "--profile", str(slow_profile), "--json", data_dir=tmp_path,
    )  # fmt: skip

    assert run.returncode == 0, run.stderr
    payload = json.loads(run.stdout, parse_constant=pytest.fail)
    assert payload["feasible"] is False
    assert payload["overloaded"].startswith("overloaded: ceiling ")
    assert payload["p99_ms"] is None and payload["p50_ms"] is None
