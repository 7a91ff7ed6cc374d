"""The Batching page's what-if without Streamlit: the sliders' ranges, the headline inside its
band, the instances, and the export of the settings a Verify measured."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from optistudio.core.batching.instances import InstanceLatency
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate, simulate_band
from optistudio.core.batching.triton import parse_pbtxt
from optistudio.core.model.intake import inspect_model
from optistudio.studio import batching_services as batching
from optistudio.studio import batching_whatif as whatif

SLOW = LatencyProfile(
    batch_sizes=[1, 2, 4],
    mean_ms=[20.0, 36.0, 70.0],
    runs=[
        (b, ms * (1 + 0.2 * (i % 5 == 0)))
        for i, (b, ms) in enumerate([(1, 20.0), (2, 36.0), (4, 70.0)] * 40)
    ],
    instance_latency=[
        InstanceLatency(
            instances=2, threads=1, slowdown=[1.6, 1.7, 1.8], mean_ms=[32, 61, 126], runs=60
        )
    ],
)
"""A CNN of about 57 req/s at batch 4 alone; two instances on shared cores serve a little more."""


def test_the_rate_slider_stops_near_one_and_a_half_ceilings() -> None:
    low, high, step = whatif.rate_bounds(SLOW, 4)
    best = max(SLOW.ceiling(4, with_handoff=True, instances=n)[0] for n in (1, 2))

    assert best * 1.5 <= high < best * 1.5 + 2 * step
    assert low == step and 100 <= high / step <= 400  # a few hundred stops, not 60000
    assert high < SLOW.ceiling(4)[0] * 8  # not eight independent copies' ceiling


@pytest.mark.parametrize(("span", "step"), [(75, 0.5), (1500, 10), (3, 0.02), (0.5, 0.01)], ids=str)
def test_steps_are_one_two_five(span: float, step: float) -> None:
    assert whatif.nice_step(span) == pytest.approx(step)


def test_a_kept_rate_survives_a_range_that_moved() -> None:
    bounds = whatif.rate_bounds(SLOW, 4)

    assert whatif.kept_rate(42.0, bounds, 10.0) == pytest.approx(42.0)
    assert whatif.kept_rate(10_000.0, bounds, 10.0) == bounds[1]  # pulled in, not reset
    assert whatif.kept_rate(None, bounds, 10.0) == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("instances", "rate"), [(1, 30.0), (1, 52.0), (2, 60.0)], ids=["light", "knee", "two"]
)
def test_the_headline_lies_inside_its_band(instances: int, rate: float) -> None:
    settings = BatchingSettings(max_batch_size=4, timeout_ms=2, instances=instances)
    band = simulate_band(SLOW, settings, rate=rate, seconds=5, draws=8)
    point = simulate(SLOW, settings, rate=rate, requests=2000)

    figures = whatif.headline(band, point)

    assert band.p99_low_ms <= figures["p99_ms"] <= band.p99_high_ms
    assert band.p50_low_ms <= figures["p50_ms"] <= band.p50_high_ms
    assert band.throughput_low <= figures["throughput"] <= band.throughput_high


def test_the_instances_slider_spans_the_measured_counts() -> None:
    one = SLOW.model_copy(update={"instance_latency": []})

    assert whatif.most_instances(SLOW) == 2
    assert whatif.most_instances(one) == 2  # one more, said to be unmeasured
    assert "measured running at once" in whatif.instances_caption(SLOW, 2)
    assert "independent copies" in whatif.instances_caption(one, 2)
    assert whatif.instances_caption(SLOW, 1) == ""


def test_predictions_per_instance_count_follow_the_measured_slowdown() -> None:
    settings = BatchingSettings(max_batch_size=4, timeout_ms=2)

    frame = whatif.by_instances(SLOW, settings, 40.0)

    assert frame["instances"].tolist() == [1, 2] and frame["measured"].all()
    one, two = frame["ceiling"].tolist()
    each = max(
        b / (ms * f) for b, ms, f in zip([1, 2, 4], SLOW.mean_ms, [1.6, 1.7, 1.8], strict=True)
    )
    assert one == pytest.approx(4 / 70.0 * 1000)
    assert two == pytest.approx(2 * each * 1000)  # the slowdown measured, not twice one alone


def verify_row(job: int, status: str = "succeeded") -> dict[str, Any]:
    measured = SimpleNamespace(throughput=88.0, p99_ms=140.0)
    return {"job": job, "status": status, "result": SimpleNamespace(measured=measured)}


def test_the_export_carries_the_instances_verify_measured(tiny_model: Path) -> None:
    sliders = BatchingSettings(max_batch_size=8, timeout_ms=2)
    verified = BatchingSettings(max_batch_size=4, timeout_ms=5, instances=2)
    specs = {12: {"settings": verified.model_dump(mode="json")}}
    jobs = [verify_row(13, "failed"), verify_row(12), verify_row(9)]

    settings, line = whatif.verified_settings(sliders, jobs, specs.__getitem__)
    config = parse_pbtxt(batching.triton_text("tiny", inspect_model(tiny_model), settings))
    document = json.loads(batching.pipeline_json("tiny", "onnxruntime", settings, {}))

    assert settings == verified and "Verify job #12" in line and "2 instance(s)" in line
    assert config["instance_group"][0]["count"] == 2
    assert document["instances"] == 2 and document["batching"]["instances"] == 2


def test_without_a_verify_the_export_is_the_sliders() -> None:
    sliders = BatchingSettings(max_batch_size=8, timeout_ms=2, instances=2)

    settings, line = whatif.verified_settings(sliders, [verify_row(3, "running")], dict().get)

    assert settings == sliders and line.startswith("Not verified yet")
