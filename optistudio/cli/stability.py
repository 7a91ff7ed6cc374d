"""The words `bench`'s table says about a measurement's stability, in the terms of the rule
that judged it (optistudio.core.measure.stats): the last N window medians each within the
tolerance of their mean. The table shows that largest deviation, not the windows' max-min
spread (up to twice as large: "spread 19 %" beside "stable" read as a contradiction)."""

from __future__ import annotations

from typing import Any

from optistudio.core.measure.stats import window_deviation


def stability_cells(row: dict[str, Any], spec: dict[str, Any]) -> tuple[str, str]:
    """(the deviation cell, the verdict) of one result row of `bench --json` under its spec."""
    windows, tolerance = int(spec["stability_windows"]), float(spec["stability_tolerance"])
    deviation = window_deviation(row.get("window_p50s_ms") or [], windows=windows)
    cell = "—" if deviation is None else f"±{deviation:.1%}"
    rule = f"{windows} window p50s within ±{tolerance:.0%} of their mean"
    if row["stable"]:
        verdict = f"stable: last {rule}"
    elif deviation is None:
        verdict = f"UNSTABLE: fewer than the {rule} the rule asks"
    else:
        verdict = f"UNSTABLE: last {windows} window p50s ±{deviation:.1%}, over ±{tolerance:.0%}"
    return cell, f"{verdict} (cv {row['cv']:.1%} over all runs)"
