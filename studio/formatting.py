"""Numbers as people read them: binary sizes and SI counts."""

from __future__ import annotations


def human_bytes(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def human_count(value: float | None) -> str:
    """1234 -> '1.23 K', 4.2e9 -> '4.20 G'; None -> 'unknown'."""
    if value is None:
        return "unknown"
    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {suffix}"
    return f"{value:,.0f}"
