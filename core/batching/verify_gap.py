"""Whether the model's own speed during a Verify explains the gap between predicted and measured.

A Verify measures how fast the runner went against the profile it was predicted from
(`VerifyPrediction.slowdown`: its runner time, less what the profile expects serving to add,
over the profile's for the same batches: optistudio.core.batching.recalibrate's
`served_slowdown`). A model that ran s times slower than profiled makes every batch longer and
the queue with it, so it explains a measured p99 *above* the prediction; s times faster explains
one *below* it. It cannot explain a gap the other way, and a small speed change cannot explain a
large gap:

- |s - 1| <= SPEED_DRIFT: the model ran as profiled; the speed explains nothing (no note).
- the direction: sign(s - 1) must be sign(measured - predicted); otherwise the note says the
  speed points the other way and the gap lies elsewhere (the serving costs, the arrivals).
- the size, where the prediction at the run's own speed is known (`at_run_speed`, the refitted
  profile's prediction for the same run): the share of the gap it closes,
  (predicted - at_run_speed) / (predicted - measured); under EXPLAINS of it, the note says the
  speed accounts for that share only.

The Batching page shows the note; tests hold it to given numbers.
"""

from __future__ import annotations

SPEED_DRIFT = 0.10
"""A runner within this share of the profile's speed ran as profiled."""
EXPLAINS = 0.5
"""Least share of the gap the speed must close to be named its cause."""


def speed_gap_note(
    slowdown: float,
    predicted_p99_ms: float,
    measured_p99_ms: float,
    *,
    at_run_speed_p99_ms: float | None = None,
) -> str | None:
    """One paragraph on whether the model's speed during the run (`slowdown`: > 1 slower than
    profiled) explains measured against predicted p99, or None when it ran as profiled."""
    if abs(slowdown - 1) <= SPEED_DRIFT or slowdown <= 0:
        return None
    pace = f"{slowdown:.2f}x slower" if slowdown > 1 else f"{1 / slowdown:.2f}x faster"
    ran = f"The model ran {pace} during this verify run than in the profile"
    gap = measured_p99_ms - predicted_p99_ms
    side = "above" if gap > 0 else "below"
    if (slowdown > 1) != (gap > 0):
        return (
            f"{ran}, yet the measured p99 ({measured_p99_ms:.3g} ms) lies {side} the predicted "
            f"{predicted_p99_ms:.3g} ms: a {'slower' if slowdown > 1 else 'faster'} model would "
            "move it the other way, so the gap comes from elsewhere (what serving costs beside "
            "the model's runs, or the arrivals), not from the model's speed."
        )
    share = _explained(predicted_p99_ms, measured_p99_ms, at_run_speed_p99_ms)
    if share is not None and share < EXPLAINS:
        return (
            f"{ran}, which moves the p99 the way it went ({measured_p99_ms:.3g} ms measured, "
            f"{predicted_p99_ms:.3g} predicted) but the profile refitted to this run's own "
            f"runner times predicts {at_run_speed_p99_ms:.3g} ms: the speed accounts for about "
            f"{max(share, 0):.0%} of the gap, the rest comes from elsewhere (what serving costs "
            "beside the model's runs, or the arrivals)."
        )
    return (
        f"{ran}, so predicted and measured describe different machines (other load on it, "
        f"clocks): the gap in p99 ({measured_p99_ms:.3g} ms measured, {predicted_p99_ms:.3g} "
        "predicted) comes from that, not from the batching policy. Profile again when the "
        "machine is as it will be in service, then verify."
    )


def _explained(predicted: float, measured: float, at_speed: float | None) -> float | None:
    """The share of the gap predicted -> measured that the prediction at the run's speed
    closes; None without that prediction or without a gap."""
    if at_speed is None or predicted == measured:
        return None
    return (predicted - at_speed) / (predicted - measured)
