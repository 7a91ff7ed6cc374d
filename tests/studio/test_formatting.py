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


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("p50_ms", "p50 (ms)"),
        ("mean_queue_ms", "mean queue (ms)"),
        ("boxes_per_frame", "boxes per frame"),
        ("offset_s", "offset (s)"),
        ("p50 (ms)", "p50 (ms)"),
        ("job", "job"),
    ],
    ids=["latency", "queue", "words", "seconds", "already-readable", "one-word"],
)
def test_a_field_name_becomes_a_header(name: str, text: str) -> None:
    from optistudio.studio.formatting import header

    assert header(name) == text


def test_python_list_text_reads_as_prose_and_shapes_stay() -> None:
    from optistudio.studio.formatting import prose

    assert (
        prose("dynamic dims ['batch', 'height', 'width'] on input x")
        == "dynamic dims batch, height, width on input x"
    )
    assert prose("shape [1, 3, 224, 224]") == "shape [1, 3, 224, 224]"


def test_missing_values_read_as_a_dash_and_full_number_columns_stay_numbers() -> None:
    import math

    from optistudio.studio.formatting import EMPTY, readable_frame

    table = readable_frame(
        [
            {"p50_ms": 1.0, "speedup": 2.0, "dims": ["h", "w"]},
            {"p50_ms": 2.0, "speedup": None, "dims": []},
            {"p50_ms": 3.0, "speedup": math.nan, "dims": None},
        ],
        numbers={"speedup": "{:.2f}x"},
    )

    assert list(table.columns) == ["p50 (ms)", "speedup", "dims"]
    assert table["p50 (ms)"].dtype.kind == "f"  # sorts as numbers
    assert list(table["speedup"]) == ["2.00x", EMPTY, EMPTY]
    assert list(table["dims"]) == ["h, w", EMPTY, EMPTY]


def test_the_uploaders_state_the_limit_intake_enforces() -> None:
    from optistudio.studio.formatting import UPLOAD_NOTE, upload_limit_style

    style = upload_limit_style(512)

    assert f"{UPLOAD_NOTE} span {{display: none;}}" in style  # Streamlit's "1GB per file"
    assert "content: 'Up to 512 MB per file'" in style
