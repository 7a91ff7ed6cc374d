"""The video job through run_job on a real SQLite database (no broker): a tiny CNN playing a
generated or an uploaded clip, its report stored as the kind's result, progress per phase, and
the model's input profile setting the frame size of a model whose size is dynamic."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from diagnostic_models import build_cnn
from onnx import TensorProto, helper

from optistudio.core.video.clips import make_clip
from optistudio.db.models import Job, JobKind, JobStatus
from optistudio.services.catalog import store_dataset
from optistudio.services.jobkinds import VIDEO, VideoJobSpec
from optistudio.workers.jobs import JobContext
from optistudio.workers.work import work_of
from tests.workers.conftest import finished_job

video_job = work_of(JobKind.video)


def _dynamic_image_model(path: Path) -> Path:
    """[n, 3, h, w] -> [n, 3]: a global average pool, so any frame size runs."""
    nodes = [
        helper.make_node("GlobalAveragePool", ["x"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "gap",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def _fixed_image_model(path: Path, *, mixing: bool) -> Path:
    """[1, 3, 16, 16] -> [1, 3], its batch fixed at 1: a global average pool (the rewrite
    frees the batch), or with `mixing` a mean over the batch first (the rewrite is refused)."""
    nodes = [
        helper.make_node("GlobalAveragePool", ["m" if mixing else "x"], ["g"]),
        helper.make_node("Flatten", ["g"], ["y"]),
    ]
    if mixing:
        nodes.insert(0, helper.make_node("ReduceMean", ["x"], ["m"], axes=[0], keepdims=1))
    graph = helper.make_graph(
        nodes,
        "fixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_a_fixed_batch_model_plays_through_its_rewrite_or_on_instances(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path
) -> None:
    from optistudio.core.batching.instances import instance_counts

    freed = store_model(_fixed_image_model(tmp_path / "f.onnx", mixing=False))
    mixing = store_model(_fixed_image_model(tmp_path / "m.onnx", mixing=True))
    spec = VideoJobSpec(streams=2, seconds=0.4)

    rewritten = finished_job(db_factory, JobKind.video, freed, spec)
    instances = finished_job(db_factory, JobKind.video, mixing, spec)

    assert rewritten.status == JobStatus.succeeded, rewritten.message
    assert instances.status == JobStatus.succeeded, instances.message
    batched = VIDEO.parse_result(rewritten.result)
    served = VIDEO.parse_result(instances.result)
    assert "batch is fixed at 1" in batched.batched_rewrite and not batched.batch_refused
    assert batched.batched.max_batch_size > 1 and batched.instances == 1
    count = instance_counts()[-1]
    assert served.instances == count and served.batched.max_batch_size == 1
    assert f"Served at batch 1 on {count} instance(s) instead." in served.batch_refused
    assert served.per_frame is not None and served.batched.frames > 0
    assert served.batch_refused in instances.message and not served.batched_rewrite


def test_a_generated_clip_on_two_streams_is_stored_per_stream(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path
) -> None:
    model_id = store_model(build_cnn(tmp_path / "cnn.onnx"))
    spec = VideoJobSpec(streams=2, seconds=0.6, realtime=True)

    job = finished_job(db_factory, JobKind.video, model_id, spec)

    assert job.status == JobStatus.succeeded, job.message
    result = VIDEO.parse_result(job.result)
    assert [s.stream for s in result.batched.streams] == [0, 1]
    assert all(s.frames > 0 and s.p50_ms <= s.p99_ms for s in result.batched.streams)
    assert result.clip == "generated" and result.batched.streams[0].source == "generated.mp4"
    assert result.batched.decoder == "h264" and result.input_shape == [1, 3, 16, 16]
    assert result.per_frame is not None and result.per_frame.max_batch_size == 1
    assert result.speedup == pytest.approx(result.batched.fps / result.per_frame.fps)
    assert result.capacity is None
    assert "2 stream(s)" in job.message and "decoder h264" in job.message


def test_an_uploaded_clip_and_the_capacity_search(  # type: ignore[no-untyped-def]
    db_factory, app_settings, store_model, tmp_path
) -> None:
    model_id = store_model(build_cnn(tmp_path / "cnn.onnx"))
    clip = make_clip(tmp_path / "street.mp4", seconds=1, size=(72, 96), seed=3)
    with clip.open("rb") as stream:
        stored = store_dataset(app_settings, stream, filename="street.mp4")
    spec = VideoJobSpec(
        clip_path=str(stored),
        clip_name="street.mp4",
        seconds=0.3,
        baseline=False,
        capacity=True,
        max_streams=2,
        probe_seconds=0.3,
    )
    phases: list[str] = []

    def watched(job: Job, context: JobContext) -> tuple[str, int | None]:
        write = context.progress

        def progress(fraction: float, message: str) -> None:
            phases.append(message)
            write(fraction, message)

        context.progress = progress  # type: ignore[method-assign]
        return video_job(job, context)

    job = finished_job(db_factory, JobKind.video, model_id, spec, watched)

    assert job.status == JobStatus.succeeded, job.message
    result = VIDEO.parse_result(job.result)
    assert result.clip == "street.mp4" and result.per_frame is None and result.speedup is None
    assert result.capacity is not None and result.capacity.frame_rate == 25
    assert set(result.capacity.tried) <= {1, 2} and 0 <= result.capacity.streams <= 2
    assert phases[0].startswith("batched run") and phases[1].startswith("capacity search")
    assert any(p.startswith("capacity probe: 1 stream(s)") for p in phases)


def test_the_model_profile_sets_the_frame_size_of_a_dynamic_model(  # type: ignore[no-untyped-def]
    db_factory, store_model, tmp_path
) -> None:
    model_id = store_model(_dynamic_image_model(tmp_path / "gap.onnx"))

    job = finished_job(
        db_factory, JobKind.video, model_id, VideoJobSpec(seconds=0.3, baseline=False)
    )

    assert job.status == JobStatus.succeeded, job.message
    profiled = VIDEO.parse_spec(job.spec)  # the spec as fed: the profile's sizes under it
    height, width = (
        profiled.dims.get("h", profiled.dims.get("x.2")),
        profiled.dims.get("w", profiled.dims.get("x.3")),
    )
    assert VIDEO.parse_result(job.result).input_shape == [1, 3, height, width]


def test_a_model_that_is_no_video_model_fails_with_why(  # type: ignore[no-untyped-def]
    db_factory, store_model, make_model
) -> None:
    model_id = store_model(make_model())

    job = finished_job(db_factory, JobKind.video, model_id, VideoJobSpec(seconds=0.3))

    assert job.status == JobStatus.failed and job.error_detail is None
    assert "one image input of rank 4" in job.message
