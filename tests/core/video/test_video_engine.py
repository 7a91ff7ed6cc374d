"""The video engine on clips made here: decode and pacing, cross-stream batching routed back in
order, drops under a slow runner, and the capacity search's answer when nothing holds."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from diagnostic_models import build_cnn
from onnx import TensorProto, helper

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.data.images import ImagePreprocessing, preprocess
from optistudio.core.errors import DataMismatch, InvalidSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.video.clips import make_clip
from optistudio.core.video.decode import FrameSource
from optistudio.core.video.engine import play
from optistudio.core.video.run import capacity, frame_size, run_video
from optistudio.core.video.settings import VideoSettings

FPS = 25


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    folder = tmp_path_factory.mktemp("clips")
    return [make_clip(folder / f"clip{seed}.mp4", seconds=2, fps=FPS, size=(72, 96), seed=seed)
            for seed in (0, 1)]  # fmt: skip


@pytest.fixture(scope="module")
def cnn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_cnn(tmp_path_factory.mktemp("cnn") / "cnn.onnx")


@pytest.fixture
def session(cnn: Path):  # type: ignore[no-untyped-def]
    loaded = get_backend("onnxruntime").load(cnn, SessionOptions(threads=1))
    yield loaded
    loaded.close()


def frames(source: FrameSource, count: int) -> list[np.ndarray]:
    return [np.asarray(source.next_image()) for _ in range(count)]


def test_a_stream_starts_at_its_offset_and_loops(clips: list[Path]) -> None:
    from_start = frames(FrameSource(clips[0], hardware=False), 2 * FPS)

    late = FrameSource(clips[0], offset=1.0)
    shown = frames(late, 2 * FPS)

    assert (late.rate, late.duration, late.decoder) == (FPS, 2.0, "h264")
    assert np.array_equal(shown[0], from_start[FPS])
    assert np.array_equal(shown[FPS], from_start[0])  # looped back to the start
    assert not np.array_equal(from_start[0], from_start[1])  # the shapes move


def test_a_missing_file_is_named_without_its_folder(tmp_path: Path) -> None:
    with pytest.raises(DataMismatch, match="'gone.mp4' does not exist") as caught:
        FrameSource(tmp_path / "gone.mp4")
    assert str(tmp_path) not in caught.value.message


@pytest.mark.timing
def test_realtime_pacing_offers_each_due_frame_once(cnn: Path, clips: list[Path], session) -> None:  # type: ignore[no-untyped-def]
    settings = VideoSettings(streams=2, seconds=0.6, realtime=True)

    run = play(session.run, inspect_model(cnn).inputs, clips, settings, size=(16, 16))

    due = int(np.ceil(0.6 * FPS))  # frames 0..14 are due before the run stops
    assert [s.frames + s.dropped for s in run.streams] == [due, due]
    assert run.pacing == "realtime" and run.decoder in ("h264", "h264_cuvid")
    assert run.decoding == ("hardware" if run.decoder == "h264_cuvid" else "software")
    assert run.p50_ms is not None and run.p50_ms <= (run.p99_ms or 0)


@pytest.mark.timing
def test_frames_of_several_streams_batch_together_and_come_back_in_order(
    cnn: Path, clips: list[Path], session
) -> None:  # type: ignore[no-untyped-def]
    got: dict[int, list[tuple[int, np.ndarray]]] = {0: [], 1: [], 2: []}
    settings = VideoSettings(
        streams=3, seconds=0.5, batching=BatchingSettings(max_batch_size=8, timeout_ms=50)
    )
    inputs = inspect_model(cnn).inputs

    run = play(session.run, inputs, clips, settings, size=(16, 16),
               on_result=lambda s, i, out: got[s].append((i, out.outputs[0])))  # fmt: skip

    assert run.mean_batch_size > 1 and run.dropped == 0
    pre = ImagePreprocessing()
    for report in run.streams:
        indices = [index for index, _ in got[report.stream]]
        assert indices == list(range(report.frames)) and report.frames > 0
        own = FrameSource(clips[report.stream % 2], offset=report.offset_s)
        for index, output in got[report.stream]:
            alone = session.run({"x": preprocess(own.next_image(), pre, (16, 16))[None]})[0]
            np.testing.assert_allclose(output, alone, rtol=1e-4, atol=1e-5, err_msg=f"{index}")
    assert [s.offset_s for s in run.streams] == [0.0, 0.0, 1.0]  # stream 2: clip0's second


@pytest.mark.timing
@pytest.mark.parametrize("policy", ["drop_oldest", "skip_to_newest"])
def test_a_slow_runner_makes_realtime_streams_drop_and_count_it(
    cnn: Path, clips: list[Path], session, policy: str
) -> None:  # type: ignore[no-untyped-def]
    def slow(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        time.sleep(0.1)  # 10 batches a second against 2 x 25 frames a second
        return session.run(feeds)

    settings = VideoSettings(
        streams=2, seconds=0.8, realtime=True, drop_policy=policy,
        batching=BatchingSettings(max_batch_size=1),
    )  # fmt: skip

    run = play(slow, inspect_model(cnn).inputs, clips, settings, size=(16, 16))

    due = int(np.ceil(0.8 * FPS))
    assert all(s.dropped > 0 for s in run.streams)
    assert [s.frames + s.dropped for s in run.streams] == [due, due]
    assert run.dropped == sum(s.dropped for s in run.streams)


def test_capacity_is_zero_when_one_stream_cannot_keep_up(
    cnn: Path, clips: list[Path], session
) -> None:  # type: ignore[no-untyped-def]
    def slow(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        time.sleep(0.1)
        return session.run(feeds)

    settings = VideoSettings(batching=BatchingSettings(max_batch_size=1))

    found = capacity(slow, inspect_model(cnn).inputs, clips[:1], settings, (16, 16), 4, 0.5)

    assert found.streams == 0 and found.tried == {1: False}


def test_run_video_reports_batched_baseline_and_speedup(cnn: Path, clips: list[Path]) -> None:
    report = run_video(cnn, clips[:1], VideoSettings(streams=2, seconds=0.4))

    assert report.per_frame is not None and report.per_frame.max_batch_size == 1
    assert report.speedup == pytest.approx(report.batched.fps / report.per_frame.fps)
    assert report.input_shape == [1, 3, 16, 16] and report.model == "cnn.onnx"
    cpu = report.batched.cpu
    assert cpu.decode_s > 0 and cpu.decode_share + cpu.inference_share == pytest.approx(1)


def test_a_model_without_one_image_input_is_refused(tmp_path: Path, clips: list[Path]) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "flat",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
    )  # fmt: skip
    path = tmp_path / "flat.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())

    with pytest.raises(InvalidSpec, match="one image input of rank 4"):
        run_video(path, clips, VideoSettings(seconds=0.1))


def test_frame_size_comes_from_the_shape_when_the_model_leaves_it_open(cnn: Path) -> None:
    spec = inspect_model(cnn).inputs[0].model_copy(update={"shape": ["n", 3, "h", "w"]})
    pre = ImagePreprocessing()

    assert frame_size(spec, pre, [1, 3, 36, 64]) == (36, 64)
    with pytest.raises(InvalidSpec, match="dynamic frame size"):
        frame_size(spec, pre)
    with pytest.raises(DataMismatch, match="channel"):
        frame_size(spec, ImagePreprocessing(color="GRAY"), [1, 3, 36, 64])
