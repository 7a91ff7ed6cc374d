"""The Video page's logic without Streamlit: the job spec from the form (an uploaded clip
stored, another file refused), the job committed and sent, and what the page shows of a real
run of a tiny CNN: per-stream rows, the chart, the capacity and speedup in words."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from diagnostic_models import build_cnn

from optistudio.core.errors import InvalidSpec
from optistudio.core.video.clips import make_clip
from optistudio.core.video.run import run_video
from optistudio.core.video.settings import VideoSettings
from optistudio.db.models import JobKind, JobStatus
from optistudio.services.catalog import add_model_file
from optistudio.services.jobresults import VideoJobResult
from optistudio.studio import video_services as video
from tests.studio.conftest import view_page


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> VideoJobResult:
    """A real run: 2 real-time streams, the per-frame baseline and a capacity search up to 2."""
    folder = tmp_path_factory.mktemp("video-page")
    clip = make_clip(folder / "street.mp4", seconds=1, size=(72, 96))
    report = run_video(
        build_cnn(folder / "cnn.onnx"),
        [clip],
        VideoSettings(streams=2, seconds=0.4, realtime=True),
        capacity_streams=2,
        probe_seconds=0.3,
    )
    return VideoJobResult(**report.model_dump(), clip="street.mp4")


def _named(data: bytes, name: str) -> io.BytesIO:
    upload = io.BytesIO(data)
    upload.name = name  # type: ignore[attr-defined]  # as Streamlit's uploads carry it
    return upload


def test_the_form_becomes_a_spec_and_a_clip_is_stored(app_settings, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    clip = make_clip(tmp_path / "cam.mp4", seconds=0.2, size=(32, 32))
    form = video.VideoForm(streams=4, max_batch_size=6, timeout_ms=3, capacity=True)

    generated = video.build_spec(app_settings, form)
    uploaded = video.build_spec(app_settings, form, _named(clip.read_bytes(), "cam.mp4"))

    assert generated.clip_path is None and generated.streams == 4 and generated.capacity
    assert generated.batching.max_batch_size == 6 and generated.batching.timeout_ms == 3
    assert uploaded.clip_name == "cam.mp4" and uploaded.clip_path is not None
    assert Path(uploaded.clip_path).read_bytes() == clip.read_bytes()


def test_a_file_that_is_no_clip_is_refused_with_the_types(app_settings) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidSpec, match="'labels.txt' is not a video clip") as caught:
        video.build_spec(app_settings, video.VideoForm(), _named(b"1\n", "labels.txt"))
    assert ".mp4" in (caught.value.hint or "")


def test_submit_commits_a_video_job_and_sends_its_id(db_factory, app_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    model_id = add_model_file(
        db_factory, app_settings, build_cnn(tmp_path / "cnn.onnx"), name="cnn"
    ).model_id
    sent: list[tuple[str, list[int]]] = []
    spec = video.build_spec(app_settings, video.VideoForm(streams=3))

    def send(name: str, args: list[int]) -> str:
        sent.append((name, args))
        return "t1"

    job_id = video.submit_video(db_factory, model_id=model_id, spec=spec, send=send)

    assert sent == [("optistudio.video", [job_id])]
    (job,) = video.video_jobs(db_factory, model_id=model_id)
    assert job.id == job_id and job.status == JobStatus.queued.value
    assert job.result is None and JobKind.video.value == "video"


def test_each_stream_has_a_row_and_a_bar(result: VideoJobResult) -> None:
    rows = video.stream_rows(result)
    figure = video.streams_figure(result)

    assert [row["stream"] for row in rows] == [0, 1]
    assert {"fps", "p50_ms", "p99_ms", "dropped"} <= set(rows[0])
    fps_bars = figure.data[0]
    assert list(fps_bars.x) == ["stream 0", "stream 1"]
    assert list(fps_bars.y) == [row["fps"] for row in rows]
    assert [trace.name for trace in figure.data] == ["fps", "latency p50", "latency p99"]
    assert figure.layout.yaxis.title.text == "fps"
    assert figure.layout.yaxis2.title.text == "latency (ms)"


def test_the_capacity_and_the_speedup_in_words(result: VideoJobResult) -> None:
    capacity = video.capacity_sentence(result)
    speedup = video.speedup_sentence(result)

    assert result.capacity is not None and capacity is not None
    held = result.capacity.streams
    assert capacity.startswith("This machine holds ")
    assert (f"holds {held} real-time 25 fps stream" in capacity) or (held == 0)
    assert speedup is not None and f"{result.speedup:.2f}x" in speedup
    assert "capped at the clip's frame rate" in speedup  # a real-time run: why it is near 1
    facts = video.run_facts(result)
    assert facts["decoder"] == "h264 (software)" and facts["clip"] == "street.mp4"
    assert facts["CPU"].startswith("decode ")


def test_a_run_without_search_or_baseline_says_nothing_of_them(result: VideoJobResult) -> None:
    bare = result.model_copy(update={"capacity": None, "per_frame": None, "speedup": None})
    none_held = result.model_copy(
        update={"capacity": result.capacity.model_copy(update={"streams": 0})}  # type: ignore[union-attr]
    )

    assert video.capacity_sentence(bare) is None and video.speedup_sentence(bare) is None
    assert "holds no real-time 25 fps stream" in (video.capacity_sentence(none_held) or "")


def test_the_page_opens_on_the_model_with_a_useful_empty_state(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path, make_model
) -> None:
    add_model_file(db_factory, app_settings, make_model(), name="a")
    second = add_model_file(
        db_factory, app_settings, build_cnn(tmp_path / "b.onnx"), name="b"
    ).model_id
    at = view_page("optistudio.studio.views.video", query={"model": str(second)}, timeout=30)

    at.run()

    assert not at.exception
    assert at.selectbox[0].value == second
    assert any("No video run of this model yet" in info.value for info in at.info)
    assert at.slider[0].value == 2


def test_a_run_on_instances_says_so_instead_of_batching(result: VideoJobResult) -> None:
    served = result.model_copy(update={"instances": 2, "batch_refused": "Refused. Served..."})

    speedup = video.speedup_sentence(served)

    assert speedup is not None and speedup.startswith("On 2 instances at batch 1:")
    assert "Batching gives" not in speedup and f"{result.speedup:.2f}x" in speedup
    assert video.run_facts(served)["batching"].endswith(", 2 instances")
