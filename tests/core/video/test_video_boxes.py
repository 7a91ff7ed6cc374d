"""A detector's boxes in a video run: NMS per frame of each stream, never across the batch.

The detector is built here: its five candidate boxes sit where the frame's mean colour puts
them, so two streams of differently coloured clips get boxes in different places, and a frame
whose boxes came from (or were suppressed by) another stream's frame would show it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.data.images import ImagePreprocessing, preprocess
from optistudio.core.model.intake import inspect_model
from optistudio.core.video.clips import make_clip
from optistudio.core.video.decode import FrameSource
from optistudio.core.video.detections import box_reader, nms
from optistudio.core.video.engine import FrameResult, play
from optistudio.core.video.run import run_video
from optistudio.core.video.settings import VideoSettings

SIZE = (16, 16)
# per candidate: offset of its corners from where the frame's colour puts it, score per class
CANDIDATES = [
    (0, (0.9, 0.0)),  # kept
    (2, (0.8, 0.0)),  # IoU 0.68 with the first, same class: suppressed
    (2, (0.0, 0.7)),  # the same place, another class: kept
    (100, (0.6, 0.0)),  # far away: kept
    (50, (0.1, 0.0)),  # scores too low: dropped
]
KEPT = 3


def build_detector(path: Path) -> Path:
    """x [n, 3, 16, 16] -> boxes [n, 5, 4], scores [n, 5, 2]; box k at
    (1000 * mean R + offset_k, 1000 * mean G + offset_k), 20 x 20."""
    k = len(CANDIDATES)
    place = np.zeros((3, k * 4), np.float32)
    place[0, 0::2] = 1000.0  # x1 and x2 follow the red mean
    place[1, 1::2] = 1000.0  # y1 and y2 follow the green mean
    corners = np.array([[o, o, o + 20, o + 20] for o, _ in CANDIDATES], np.float32).reshape(-1)
    scores = np.array([s for _, s in CANDIDATES], np.float32).reshape(-1)
    inits = [
        numpy_helper.from_array(place, "place"),
        numpy_helper.from_array(corners, "corners"),
        numpy_helper.from_array(np.zeros((3, k * 2), np.float32), "no_weights"),
        numpy_helper.from_array(scores, "score_bias"),
        numpy_helper.from_array(np.array([-1, k, 4], np.int64), "box_shape"),
        numpy_helper.from_array(np.array([-1, k, 2], np.int64), "score_shape"),
    ]
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["mean"], axes=[2, 3], keepdims=0),
        helper.make_node("MatMul", ["mean", "place"], ["at"]),
        helper.make_node("Add", ["at", "corners"], ["flat_boxes"]),
        helper.make_node("Reshape", ["flat_boxes", "box_shape"], ["boxes"]),
        helper.make_node("MatMul", ["mean", "no_weights"], ["zero"]),
        helper.make_node("Add", ["zero", "score_bias"], ["flat_scores"]),
        helper.make_node("Reshape", ["flat_scores", "score_shape"], ["scores"]),
    ]
    graph = helper.make_graph(
        nodes,
        "detector",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, *SIZE])],
        [
            helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["n", k, 4]),
            helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", k, 2]),
        ],
        initializer=inits,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("boxes")
    return {
        "detector": build_detector(folder / "detector.onnx"),
        "clip0": make_clip(folder / "clip0.mp4", seconds=2, size=(72, 96), seed=0),
        "clip1": make_clip(folder / "clip1.mp4", seconds=2, size=(72, 96), seed=5),
    }


def test_nms_keeps_the_best_of_overlapping_boxes_per_class() -> None:
    boxes = np.array([[0, 0, 10, 10], [1, 1, 11, 11], [1, 1, 11, 11], [50, 50, 60, 60]], float)
    scores = np.array([0.6, 0.9, 0.8, 0.3])
    classes = np.array([0, 0, 1, 0])

    kept = nms(boxes, scores, classes)

    assert kept.tolist() == [1, 2, 3]  # 0 lost to 1 (IoU 0.68); 2 is another class
    assert nms(boxes, scores, classes, min_score=0.5).tolist() == [1, 2]
    assert nms(boxes, scores, np.zeros(4, int), max_boxes=1).tolist() == [1]


def test_a_detector_is_recognized_and_a_classifier_is_not(files, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from diagnostic_models import build_cnn

    reader = box_reader(files["detector"])

    assert reader is not None and reader.picked == ["boxes", "scores"]
    assert "NMS per frame" in reader.describe()
    assert box_reader(build_cnn(tmp_path / "cnn.onnx")) is None


@pytest.mark.timing
def test_streams_batched_together_get_only_their_own_boxes(files) -> None:  # type: ignore[no-untyped-def]
    reader = box_reader(files["detector"])
    assert reader is not None
    loaded = get_backend("onnxruntime").load(files["detector"], SessionOptions(threads=1))
    got: dict[int, list[tuple[int, FrameResult]]] = {0: [], 1: []}
    settings = VideoSettings(
        streams=2, seconds=0.5, batching=BatchingSettings(max_batch_size=8, timeout_ms=50)
    )
    sources = [files["clip0"], files["clip1"]]
    try:
        run = play(loaded.run, inspect_model(files["detector"]).inputs, sources, settings,
                   size=SIZE, boxes=reader,
                   on_result=lambda s, i, result: got[s].append((i, result)))  # fmt: skip
        pre = ImagePreprocessing()
        for stream in (0, 1):
            own = FrameSource(sources[stream])
            for _, result in got[stream]:
                alone = reader(loaded.run({"x": preprocess(own.next_image(), pre, SIZE)[None]}))
                assert result.boxes is not None and len(result.boxes) == KEPT
                np.testing.assert_allclose(result.boxes.boxes, alone.boxes, rtol=1e-5)
                assert result.boxes.classes.tolist() == alone.classes.tolist() == [0, 1, 0]
    finally:
        loaded.close()

    assert run.mean_batch_size > 1  # frames of both streams did share batches
    assert all(s.boxes_per_frame == KEPT for s in run.streams) and run.detector is not None
    first = [got[s][0][1].boxes.boxes[0] for s in (0, 1)]  # type: ignore[union-attr]
    assert abs(first[0][0] - first[1][0]) > 5  # each stream's boxes sit where its colour says


def test_run_video_on_a_detector_reports_boxes_per_stream(files) -> None:  # type: ignore[no-untyped-def]
    report = run_video(files["detector"], [files["clip0"]], VideoSettings(streams=2, seconds=0.3))

    assert report.batched.detector is not None and report.per_frame is not None
    assert [s.boxes_per_frame for s in report.batched.streams] == [KEPT, KEPT]
    assert report.per_frame.detector == report.batched.detector
