from __future__ import annotations

import pytest

from optistudio.studio.formatting import human_bytes, human_count


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (700, "700 B"), (2048, "2.0 KiB"), (5 * 2**20, "5.0 MiB"), (3 * 2**30, "3.0 GiB")],
    ids=["zero", "bytes", "kib", "mib", "gib"],
)
def test_human_bytes(size: int, text: str) -> None:
    assert human_bytes(size) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "unknown"), (136, "136"), (1234, "1.23 K"), (4.2e9, "4.20 G")],
    ids=["none", "small", "kilo", "giga"],
)
def test_human_count(value: float | None, text: str) -> None:
    assert human_count(value) == text


def test_flagged_points_stand_out_in_the_latency_chart() -> None:
    import pandas as pd

    from optistudio.studio.charts import latency_by_batch

    wide = pd.DataFrame(
        {
            "job_id": [1, 1],
            "model_name": ["m", "m"],
            "backend": ["onnxruntime"] * 2,
            "batch_size": [1, 8],
            "p10_ms": [0.9, 5.0],
            "p50_ms": [1.0, 6.0],
            "p90_ms": [1.2, 9.0],
            "p99_ms": [2.0, 12.0],
            "stable": [1.0, 0.0],
            "contended": [0.0, 1.0],
        }
    )

    p50 = latency_by_batch(wide).data[0]

    assert list(p50.marker.symbol) == ["circle", "diamond-open"]
    assert list(p50.hovertext) == ["", "unstable, contended"]
    assert list(p50.error_y.array) == [pytest.approx(0.2), pytest.approx(3.0)]
