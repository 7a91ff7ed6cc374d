"""A latency profile's serving probes can be shortened (`probe_time_scale`): the zoo's quick
sweep checks what the profile does with every model, not its figures, and spent most of its
batching stage in probes of 2-3 s each, then in the bare timings beside each probe and the
idle gaps' pairs. A profile whose figures are used keeps the defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from optistudio.core.batching import handoff, latency_profile, probe_speed, timer_wake
from optistudio.core.batching.latency_profile import measure_latency_profile

LONGEST_DEFAULT = max(
    handoff.SERVING_PROBE_SECONDS[1], timer_wake.TIMER_PROBE_SECONDS[1], handoff.HANDOFF_SECONDS
)


def _sent_seconds(monkeypatch: pytest.MonkeyPatch, sends: float = 1.0) -> dict[str, list[float]]:
    """How long each probe's load run was asked to send: "timed" for the runs with a batching
    timeout (the timer probes), "untimed" for the others. Each run then sends `sends` of what
    it was asked (what is checked is the asking)."""
    lengths: dict[str, list[float]] = {}
    real = handoff.run_load  # every serving probe sends through it (handoff.serve_at)

    def recording(pipeline: Any, *args: Any, **kw: Any):  # type: ignore[no-untyped-def]
        kind = "timed" if pipeline.settings.timeout_ms > 0 else "untimed"
        lengths.setdefault(kind, []).append(kw["seconds"])
        return real(pipeline, *args, **kw | {"seconds": kw["seconds"] * sends})

    monkeypatch.setattr(handoff, "run_load", recording)
    return lengths


def _asked(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Any]]:
    """What the bare timings beside the probes ("bare": (seconds, rounds)), the idle gaps'
    pairs ("idle": trials) and the machine's own pace before and after them ("pace":
    seconds) were asked for."""
    asked: dict[str, list[Any]] = {"bare": [], "idle": [], "pace": []}
    bare, idle, pace = handoff.speed_beside, latency_profile.idle_extras, latency_profile.read_pace

    def reading(seconds: float) -> list[float]:
        asked["pace"].append(seconds)
        return pace(seconds)

    def timing(*args: Any, seconds: float, rounds: int, **kw: Any) -> float:
        asked["bare"].append((seconds, rounds))
        return bare(*args, seconds=seconds, rounds=rounds, **kw)

    def pairs(*args: Any, trials: int, **kw: Any) -> Any:
        asked["idle"].append(trials)
        return idle(*args, trials=trials, **kw)

    monkeypatch.setattr(handoff, "speed_beside", timing)
    monkeypatch.setattr(latency_profile, "idle_extras", pairs)
    monkeypatch.setattr(latency_profile, "read_pace", reading)
    return asked


def test_a_shorter_scale_shortens_every_probe_that_sends(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lengths = _sent_seconds(monkeypatch)
    asked = _asked(monkeypatch)

    profile = measure_latency_profile(
        tiny_model, max_batch_size=4, min_seconds=0.02, instances=[1], probe_time_scale=0.1
    )

    assert set(lengths) == {"untimed", "timed"}  # hand-back, serving and timer probes ran
    assert max(s for sent in lengths.values() for s in sent) <= 0.1 * LONGEST_DEFAULT + 1e-9
    assert profile.serving_delays_ms  # the short light probe still served and measured
    assert profile.probe_time_scale == 0.1  # the profile says it is a quick one
    assert "quick profile" in profile.quick_note() and "10%" in profile.quick_note()
    assert asked["bare"] and all(  # beside every probe, shortened too
        seconds <= 0.1 * probe_speed.REFERENCE_SECONDS + 1e-9
        and rounds == probe_speed.QUICK_REFERENCE_ROUNDS
        for seconds, rounds in asked["bare"]
    )
    assert asked["idle"] == [latency_profile.QUICK_IDLE_TRIALS]
    quick_pace = latency_profile.PACE_SECONDS * latency_profile.QUICK_PACE_SHARE
    assert asked["pace"] == [pytest.approx(quick_pace)] * 2
    assert profile.environment["machine_pace"]["windows"] >= 2  # one window each side at least


def test_by_default_the_serving_probes_send_their_full_length(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lengths = _sent_seconds(monkeypatch, sends=0.1)
    asked = _asked(monkeypatch)

    profile = measure_latency_profile(tiny_model, max_batch_size=2, min_seconds=0.02, instances=[1])

    assert max(lengths["untimed"]) >= handoff.SERVING_PROBE_SECONDS[0]
    assert max(lengths["timed"]) >= timer_wake.TIMER_PROBE_SECONDS[0]
    assert profile.probe_time_scale == 1.0 and profile.quick_note() == ""
    defaults = (probe_speed.REFERENCE_SECONDS, probe_speed.REFERENCE_ROUNDS)
    assert asked["bare"] and set(asked["bare"]) == {defaults}
    assert asked["idle"] == [latency_profile.IDLE_TRIALS]
    assert asked["pace"] == [latency_profile.PACE_SECONDS] * 2


def test_a_profile_stored_before_quick_profiles_reads_as_a_full_one() -> None:
    from optistudio.core.batching.latency import LatencyProfile

    stored = LatencyProfile.model_validate({"batch_sizes": [1, 2], "mean_ms": [1.0, 1.5]})

    assert stored.probe_time_scale == 1.0 and stored.quick_note() == ""
