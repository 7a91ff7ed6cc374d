"""A stored video run on the Compare page beside a benchmark result: a real video job (tiny
CNN, two real-time streams of a generated clip, per-frame baseline, capacity search) stores its
figures as measurements; Compare offers it, shows its per-stream fps, p99, drops, real-time
streams held and speedup in the same table, and the HTML report carries them."""

from __future__ import annotations

import pytest
from compare_seed import ENV, benchmark
from diagnostic_models import build_cnn

from optistudio.core.metrics import METRICS
from optistudio.core.report.html import report_html
from optistudio.core.report.snapshot import VIDEO_METRICS, table_metrics, table_records
from optistudio.db.models import JobKind
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import VIDEO, VideoJobSpec
from optistudio.studio import video_services as video
from optistudio.studio.compare_services import Selection, build_snapshot, result_options
from tests.workers.conftest import succeeded_job


def test_a_video_run_sits_beside_a_benchmark_result(db_factory, app_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model_id = add_model_file(
        db_factory, app_settings, build_cnn(tmp_path / "cnn.onnx"), name="cnn"
    ).model_id
    bench_job = benchmark(db_factory, model_id, 1, 2.0, ENV)
    spec = VideoJobSpec(
        streams=2, seconds=0.5, realtime=True, capacity=True, max_streams=2, probe_seconds=0.3
    )
    job = succeeded_job(db_factory, JobKind.video, model_id, spec)
    result = VIDEO.parse_result(job.result)
    key = video.compare_key(job.id, result)

    options = result_options(db_factory)
    snapshot, missing = build_snapshot(
        db_factory, Selection(keys=[f"{bench_job}.onnxruntime.1.2", key])
    )

    assert missing == [] and "video, max batch 8" in options[key]
    bench_row, video_row = snapshot.rows
    assert "video ×2" in video_row.label and "video" not in bench_row.label
    figures = video_row.metrics
    streams = result.batched.streams
    assert figures["streams"] == 2 and figures["dropped"] == result.batched.dropped
    assert figures["stream_fps"] == pytest.approx(sum(s.fps for s in streams) / 2)
    assert figures["stream_fps_min"] == pytest.approx(min(s.fps for s in streams))
    assert figures["p99_ms"] == result.batched.p99_ms
    assert figures["throughput"] == pytest.approx(result.batched.fps)
    assert figures["speedup_vs_per_frame"] == pytest.approx(result.speedup)
    assert result.capacity is not None
    assert figures["realtime_streams"] == result.capacity.streams
    assert set(VIDEO_METRICS) <= set(table_metrics(snapshot))
    records = table_records(snapshot)
    assert records[0]["stream_fps"] is None and records[1]["p99_ms"] is not None
    page = report_html(snapshot)
    assert METRICS["stream_fps_min"].label in page and "Video runs (video ×N)" in page


def test_no_video_columns_without_video_rows(db_factory, app_settings, make_model) -> None:  # type: ignore[no-untyped-def]
    model_id = add_model_file(db_factory, app_settings, make_model(), name="m").model_id
    job = benchmark(db_factory, model_id, 1, 2.0, ENV)

    snapshot, _ = build_snapshot(db_factory, Selection(keys=[f"{job}.onnxruntime.1.2"]))

    assert not set(VIDEO_METRICS) & set(table_metrics(snapshot))
    assert "Video runs" not in report_html(snapshot)
