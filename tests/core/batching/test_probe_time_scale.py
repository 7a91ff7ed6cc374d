"""A latency profile's serving probes can be shortened (`probe_time_scale`): the zoo's quick
sweep checks what the profile does with every model, not its figures, and spent most of its
batching stage in probes of 2-3 s each. A profile whose figures are used keeps the defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from optistudio.core.batching import handoff, timer_wake
from optistudio.core.batching.latency_profile import measure_latency_profile

LONGEST_DEFAULT = max(
    handoff.SERVING_PROBE_SECONDS[1], timer_wake.TIMER_PROBE_SECONDS[1], handoff.HANDOFF_SECONDS
)


def _sent_seconds(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[float]]:
    """How long each probe's load run was asked to send, by the module that sent it."""
    lengths: dict[str, list[float]] = {}
    for module in (handoff, timer_wake):
        real = module.run_load

        def recording(*args: Any, _real: Any = real, _name: str = module.__name__, **kw: Any):  # type: ignore[no-untyped-def]
            lengths.setdefault(_name.rsplit(".", 1)[-1], []).append(kw["seconds"])
            return _real(*args, **kw)

        monkeypatch.setattr(module, "run_load", recording)
    return lengths


def test_a_shorter_scale_shortens_every_probe_that_sends(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lengths = _sent_seconds(monkeypatch)

    profile = measure_latency_profile(
        tiny_model, max_batch_size=4, min_seconds=0.02, instances=[1], probe_time_scale=0.1
    )

    assert set(lengths) == {"handoff", "timer_wake"}  # hand-back, serving and timer probes ran
    assert max(s for sent in lengths.values() for s in sent) <= 0.1 * LONGEST_DEFAULT + 1e-9
    assert profile.serving_delays_ms  # the short light probe still served and measured


def test_by_default_the_serving_probes_send_their_full_length(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lengths = _sent_seconds(monkeypatch)

    measure_latency_profile(tiny_model, max_batch_size=2, min_seconds=0.02, instances=[1])

    assert max(lengths["handoff"]) >= handoff.SERVING_PROBE_SECONDS[0]
    assert max(lengths["timer_wake"]) >= timer_wake.TIMER_PROBE_SECONDS[0]
