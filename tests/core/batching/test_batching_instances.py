"""Several instances: the simulator's c servers against known service times, the measured
slowdown per instance count and the rules for an unmeasured one, old profiles, the tuner's
sweep over instances, and a fixed batch whose rewrite is refused served at batch 1."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from batching_helpers import build_batch_mixing_model

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.batching import verify
from optistudio.core.batching.instances import (
    InstanceLatency,
    concurrent_runs,
    instance_counts,
)
from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.loadgen import LoadRun
from optistudio.core.batching.recalibrate import recalibrate, recalibrate_at_instances
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate
from optistudio.core.batching.tuner import recommend
from optistudio.core.errors import InvalidSpec

NO_BATCHING = BatchingSettings(max_batch_size=1, timeout_ms=0)


def measure_load(settings: BatchingSettings, *, model: Path) -> LoadRun:
    """Thirty requests at 200 req/s through the real Pipeline."""
    return verify.measure_load(model, settings, rate=200.0, requests=30, seconds=None)


def profile_of(service_ms: float, slowdowns: dict[int, float] | None = None) -> LatencyProfile:
    """Batch 1 at a fixed service time, with the slowdown measured per instance count."""
    table = [
        InstanceLatency(instances=n, threads=1, slowdown=[f], mean_ms=[service_ms * f], runs=100)
        for n, f in sorted((slowdowns or {}).items())
    ]
    return LatencyProfile(batch_sizes=[1], mean_ms=[service_ms], instance_latency=table)


def at(instances: int) -> BatchingSettings:
    return NO_BATCHING.model_copy(update={"instances": instances})


@pytest.mark.parametrize("servers", [1, 2, 4], ids=["c1", "c2", "c4"])
def test_c_servers_saturate_at_c_over_the_service_time(servers: int) -> None:
    profile = profile_of(10.0)

    result = simulate(profile, at(servers), process="closed", clients=16, requests=6000)

    assert result.throughput == pytest.approx(servers / 0.010, rel=0.05)


def test_measured_slowdown_sets_what_the_servers_serve() -> None:
    profile = profile_of(10.0, {2: 1.5})

    result = simulate(profile, at(2), process="closed", clients=16, requests=6000)

    assert result.throughput == pytest.approx(2 / 0.015, rel=0.05)  # not 2 / 0.010
    assert profile.ceiling(1, instances=2)[0] == pytest.approx(2 / 0.015)


def test_two_servers_wait_as_an_md2_queue() -> None:
    """At rho 0.5 an M/M/2 queue waits C / (c mu - lambda) = D / 3 (Erlang C = 1/3); an M/D/2
    about half of that, and well under an M/D/1 at the same load (D / 2)."""
    service = 0.010
    waits = [
        simulate(profile_of(10.0), at(2), rate=100, requests=20_000, seed=seed).mean_queue_ms
        for seed in range(3)
    ]
    wait = float(np.mean(waits)) / 1000
    assert 0.35 * service / 3 < wait < 0.7 * service / 3


def test_an_unmeasured_count_follows_the_stated_rule() -> None:
    profile = profile_of(10.0, {2: 1.5, 4: 3.0})

    assert profile.at_instances(2).mean_ms == [15.0]
    assert profile.at_instances(3).mean_ms == pytest.approx([22.5])  # between 2 and 4
    assert profile.at_instances(8).mean_ms == pytest.approx([60.0])  # 4's, times 8 / 4
    assert profile.instances_note(2) == "" and "interpolated" in profile.instances_note(3)
    assert "serve no more than 4" in profile.instances_note(8)
    assert profile.ceiling(1, instances=8)[0] == pytest.approx(profile.ceiling(1, instances=4)[0])


def test_the_slowdown_scales_runs_and_quantiles_by_batch_size() -> None:
    table = [InstanceLatency(instances=2, threads=1, slowdown=[2.0, 1.5], mean_ms=[2, 6], runs=4)]
    profile = LatencyProfile(
        batch_sizes=[1, 4],
        mean_ms=[1.0, 4.0],
        runs=[(1, 1.0), (4, 4.0)],
        quantiles_ms=[[0.5, 1.5], [3.0, 5.0]],
        instance_latency=table,
    )

    two = profile.at_instances(2)

    assert two.mean_ms == [2.0, 6.0] and two.runs == [(1, 2.0), (4, 6.0)]
    assert two.quantiles_ms == [[1.0, 3.0], [4.5, 7.5]]
    assert two.instance_latency == [] and two.handoff_ms == profile.handoff_ms


def test_a_profile_stored_before_instances_reads_as_one_instance() -> None:
    stored = profile_of(10.0).model_dump(mode="json")
    for field in ("instance_latency", "batch_refused"):
        del stored[field]

    profile = LatencyProfile.model_validate_json(json.dumps(stored))

    assert profile.instance_counts() == [1] and profile.at_instances(3) is profile
    assert "measured one instance only" in profile.instances_note(3)
    closed = simulate(profile, at(2), process="closed", clients=8, requests=4000)
    assert closed.throughput == pytest.approx(200, rel=0.05)  # independent copies, as before


def test_a_verify_on_two_instances_refits_the_one_instance_figures() -> None:
    profile = profile_of(10.0, {2: 1.5})
    batches = SimpleNamespace(runner={1: (400, 18.0)}, handoff_ms=None)  # 20 % over 15 ms

    refit = recalibrate_at_instances(profile, batches, instances=2, verify="Verify #3")
    as_seen = recalibrate(profile.at_instances(2), batches, verify="Verify #3")

    assert refit.mean_ms[0] == pytest.approx(as_seen.mean_ms[0] / 1.5)
    assert 10.0 < refit.mean_ms[0] <= 12.0 + 1e-9  # moved toward 18 / 1.5, not toward 18
    assert refit.instance_latency == profile.instance_latency
    assert refit.calibration is not None and refit.calibration.verify == "Verify #3"


def test_a_table_that_does_not_fit_the_sizes_is_refused() -> None:
    table = [InstanceLatency(instances=2, threads=1, slowdown=[1.0, 1.0], mean_ms=[1, 1], runs=2)]
    with pytest.raises(ValueError, match="one slowdown per batch size"):
        LatencyProfile(batch_sizes=[1], mean_ms=[1.0], instance_latency=table)


def test_instance_counts_double_up_to_the_cores() -> None:
    assert instance_counts(1) == [1]
    assert instance_counts(2) == [1, 2]
    assert instance_counts(6) == [1, 2, 4, 6]


def test_the_tuner_takes_a_second_instance_where_it_serves_more() -> None:
    profile = profile_of(10.0, {2: 1.2})  # one alone serves 100 req/s, two 167

    advice = recommend(profile, p99_budget_ms=200, rate=120, max_batch_size=1, requests=2000)

    assert {c.instances for c in advice.candidates} == {1, 2}
    assert advice.feasible and advice.settings.instances == 2
    assert "2 instances" in advice.reason


def test_the_tuner_keeps_one_instance_where_two_serve_less() -> None:
    profile = profile_of(10.0, {2: 2.5})  # two on shared cores: 80 req/s in all

    advice = recommend(
        profile, p99_budget_ms=500, max_batch_size=1, timeouts_ms=(0.0,), requests=2000
    )

    assert advice.settings.instances == 1


def served_two(extra_ms: float, pace: float) -> LatencyProfile:
    """Two instances as fast as one when timed bare, served slower: `extra_ms` per call at
    80 req/s, and a saturation pace of `pace` rows/s (their serving threads had no core)."""
    row = InstanceLatency(
        instances=2, threads=1, slowdown=[1.0], mean_ms=[10.0], runs=100,
        served_load=(80.0, extra_ms), serving_delays_ms=[2.0] * 20,
        saturation=(pace, 1000.0 * 2 / pace - 10.0),
    )  # fmt: skip
    return profile_of(10.0).model_copy(
        update={
            "instance_latency": [row], "serving_delays_ms": [0.1] * 20,
            "serving_delays_rate": 20.0, "served_extra_load": [(20.0, 0.2)],
        }
    )  # fmt: skip


def test_instances_are_predicted_with_the_serving_costs_they_were_served_at() -> None:
    profile = served_two(4.0, 90.0)

    two = profile.at_instances(2)

    assert two.served_extra_load == [
        (20.0, 0.2),
        (80.0, 4.0),
        (90.0, pytest.approx(2000 / 90 - 10)),
    ]
    assert two.serving_delays_load == [(80.0, [2.0] * 20)]
    assert profile.at_instances(4).served_extra_load == two.served_extra_load  # none better
    assert profile.at_instances(2, served=False).served_extra_load == [(20.0, 0.2)]
    assert profile.at_instances(1) is profile
    assert profile.ceiling(1, with_handoff=True, instances=2)[0] == pytest.approx(90.0, rel=0.01)
    bare = profile.model_copy(update={"instance_latency": [
        profile.instance_latency[0].model_copy(
            update={"served_load": None, "serving_delays_ms": [], "saturation": None}
        )
    ]})  # fmt: skip
    assert bare.ceiling(1, with_handoff=True, instances=2)[0] == pytest.approx(200.0)  # as timed
    slower, plain = (
        simulate(p, at(2), rate=60.0, requests=3000, seed=1).p99_ms for p in (profile, bare)
    )
    assert slower > plain


def test_the_tuner_keeps_one_instance_where_two_served_less_than_timed() -> None:
    kwargs = {"p99_budget_ms": 300.0, "max_batch_size": 1, "timeouts_ms": (0.0,)}

    timed_only = recommend(
        served_two(4.0, 90.0).model_copy(update={"instance_latency": [
            InstanceLatency(instances=2, threads=1, slowdown=[1.0], mean_ms=[10.0], runs=100)
        ]}), requests=2000, **kwargs,
    )  # fmt: skip
    served = recommend(served_two(4.0, 70.0), requests=2000, **kwargs)

    assert timed_only.settings.instances == 2  # bare, two look twice as fast
    assert served.settings.instances == 1  # served, two passed 70 rows/s, one alone about 98


@pytest.mark.parametrize(("cores", "searched"), [(2, [1]), (4, [1, 2]), (None, [1, 2, 4])])
def test_the_tuner_leaves_out_instances_that_leave_no_core_for_the_serving_threads(
    cores: int | None, searched: list[int]
) -> None:
    profile = profile_of(10.0, {2: 1.2, 4: 1.6}).model_copy(
        update={"environment": {"affinity": list(range(cores))} if cores else {}}
    )
    kwargs = {"p99_budget_ms": 200.0, "rate": 120.0, "max_batch_size": 1, "requests": 2000}

    advice = recommend(profile, **kwargs)
    asked = recommend(profile, instances=[1, 2, 4], **kwargs)

    assert sorted({c.instances for c in advice.candidates}) == searched
    assert sorted({c.instances for c in asked.candidates}) == [1, 2, 4]
    left_out = [n for n in (2, 4) if n not in searched]
    if left_out:
        assert f"{', '.join(map(str, left_out))} instances were not searched" in advice.reason
        assert f"fill the {cores} cores the profile ran on" in advice.reason
    else:
        assert "not searched" not in advice.reason


@pytest.mark.parametrize(("cores", "more_cores"), [(2, True), (None, False)])
def test_where_no_setting_fits_the_advice_adds_instances_only_where_none_were_left_out(
    cores: int | None, more_cores: bool
) -> None:
    profile = profile_of(10.0, {2: 1.2, 4: 1.6}).model_copy(
        update={"environment": {"affinity": list(range(cores))} if cores else {}}
    )

    advice = recommend(
        profile, p99_budget_ms=200.0, rate=1000.0, max_batch_size=1, requests=2000
    )  # 10 ms a request: no count of these keeps up with 1,000 req/s

    assert not advice.feasible
    assert ("serve on a machine with more cores" in advice.reason) is more_cores
    assert ("Add instances" in advice.reason) is not more_cores


def test_a_refused_fixed_batch_gets_an_instances_recommendation() -> None:
    profile = profile_of(10.0, {2: 1.2}).model_copy(
        update={"batch_refused": "ReduceMean reduces over the batch."}
    )

    advice = recommend(profile, p99_budget_ms=200, rate=120, max_batch_size=16, requests=2000)

    assert {c.max_batch_size for c in advice.candidates} == {1}
    assert advice.settings.max_batch_size == 1 and advice.settings.instances == 2
    assert "Only max batch 1 was tried" in advice.reason


def test_a_refused_rewrite_is_served_as_it_is_at_batch_one(tmp_path: Path) -> None:
    model = build_batch_mixing_model(tmp_path / "mixing.onnx")

    run = measure_load(at(2), model=model)

    assert run.result.completed == 30 and not run.errors and "served as it is" in run.note
    with pytest.raises(InvalidSpec, match="batch is fixed at 1"):
        measure_load(BatchingSettings(max_batch_size=4), model=model)


@pytest.mark.slow
def test_a_refused_rewrite_is_profiled_at_batch_one(tmp_path: Path) -> None:
    model = build_batch_mixing_model(tmp_path / "mixing.onnx")

    profile = measure_latency_profile(
        model, max_batch_size=4, min_runs=3, min_seconds=0.02, probe_time_scale=0.25
    )

    assert profile.batch_sizes == [1] and "ReduceMean" in profile.batch_refused
    assert profile.instance_counts() == instance_counts()  # 1, 2, 4, ... up to these cores
    assert all(row.slowdown[0] > 0 for row in profile.instance_latency)


@pytest.mark.timing
def test_concurrent_sessions_all_run_every_size(tiny_model: Path) -> None:
    models = [
        get_backend("onnxruntime").load(tiny_model, SessionOptions(threads=1)) for _ in range(2)
    ]
    feeds = {size: {"x": np.zeros((size, 16), dtype=np.float32)} for size in (1, 2)}
    try:
        runs = concurrent_runs(models, feeds, min_runs=3, min_seconds=0.02)
    finally:
        for model in models:
            model.close()

    assert {size for size, _ in runs} == {1, 2}
    assert len(runs) >= 2 * 3 * 2 and all(ms > 0 for _, ms in runs)
