"""`bench`'s table says stability in the terms of the rule that judged it: the largest deviation
of the last window medians from their mean against the tolerance. It printed their max-min
spread ("spread 19 %") beside "stable", which reads as a contradiction of a 10 % rule."""

from __future__ import annotations

import numpy as np
import pytest

from optistudio.cli import print_table
from optistudio.cli.stability import stability_cells
from optistudio.core.measure.stats import window_deviation, window_spread, windows_agree

SPEC = {"stability_windows": 3, "stability_tolerance": 0.10}


def _row(p50s: list[float], *, stable: bool) -> dict[str, object]:
    return {"window_p50s_ms": p50s, "stable": stable, "cv": 0.042}


def test_a_19_percent_spread_that_the_rule_calls_stable_is_said_as_the_rule_sees_it() -> None:
    p50s = [2.0, 0.905, 1.0, 1.095]  # the first window is not among the last three
    assert round(window_spread(p50s), 2) == 0.19 and windows_agree(p50s)

    cell, verdict = stability_cells(_row(p50s, stable=True), SPEC)

    assert cell == "±9.5%"
    assert verdict == "stable: last 3 window p50s within ±10% of their mean (cv 4.2% over all runs)"


def test_an_unstable_row_names_its_deviation_and_the_tolerance() -> None:
    cell, verdict = stability_cells(_row([1.0, 1.0, 1.5], stable=False), SPEC)

    assert cell == "±28.6%"
    assert verdict.startswith("UNSTABLE: last 3 window p50s ±28.6%, over ±10%")


def test_too_few_windows_say_so() -> None:
    cell, verdict = stability_cells(_row([1.0, 1.2], stable=False), SPEC)

    assert cell == "—" and verdict.startswith("UNSTABLE: fewer than the 3 window p50s")


@pytest.mark.parametrize("seed", range(20))
def test_the_deviation_shown_decides_the_verdict(seed: int) -> None:
    p50s = list(np.random.default_rng(seed).uniform(0.8, 1.2, size=5))

    deviation = window_deviation(p50s)

    assert deviation is not None and windows_agree(p50s) == (deviation <= 0.10)
    assert window_spread(p50s) / 2 <= deviation + 1e-12 <= window_spread(p50s) * 2 / 3 + 1e-12


def test_the_table_shows_the_deviation_column(capsys: pytest.CaptureFixture[str]) -> None:
    row = _row([0.905, 1.0, 1.095], stable=True) | {
        "backend": "onnxruntime", "batch_size": 1, "threads": 1, "p50_ms": 1.0, "p90_ms": 1.1,
        "p99_ms": 1.2, "throughput": 900.0, "samples": 50, "window_spread": 0.19,
        "input_shapes": {"x": [1, 4]},
    }  # fmt: skip
    payload = {
        "model": {"sha256": "ab" * 32},
        "spec": SPEC | {"backend": "onnxruntime", "device": "cpu", "precision": "fp32"},
        "runtime": "onnxruntime 1",
        "results": [row],
    }

    print_table(payload)

    header, line = capsys.readouterr().out.splitlines()[1:3]
    assert header.split()[-2:] == ["window", "verdict"] and "spread" not in header
    assert "  ±9.5%  stable: last 3 window p50s within ±10% of their mean" in line
    assert "19" not in line  # the max-min spread is not shown
