"""The job-kind table: one entry per JobKind, typed specs and results, and rows stored before
the result models existed still read (each dict below is exactly what the workers wrote)."""

from __future__ import annotations

from typing import Any

import pytest

from optistudio.core.errors import ErrorCode, ErrorInfo, InvalidSpec
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.measure.soak import SoakSpec
from optistudio.core.optimize.spec import DecoderSettings, UnsteadyTiming
from optistudio.db.models import JobKind
from optistudio.services.jobkinds import (
    BATCHING_VERIFY,
    BENCHMARK,
    COMPARE,
    EXPORT,
    JOB_KINDS,
    LATENCY_PROFILE,
    OPERATOR_PROFILE,
    OPTIMIZE,
    REFERENCE_TARGET,
    VIDEO,
    CompareJobSpec,
    OperatorProfileJobSpec,
    OptimizeJobSpec,
    VideoJobSpec,
)
from optistudio.services.jobresults import StoredVariant

COMPARISON_SPEC = {
    "backend": "onnxruntime",
    "device": "cpu",
    "candidate_backend": None,
    "batch_size": 1,
    "shapes": {},
    "dims": {},
    "threads": None,
    "warmup_runs": 5,
    "min_pairs": 30,
    "min_seconds": 1.5,
    "max_seconds": 15.0,
    "confidence": 0.95,
    "resamples": 2000,
    "seed": 0,
    "min_effect": 0.02,
}
ACCURACY = {
    "samples": 32,
    "data": "synthetic",
    "max_abs_error": 0.001,
    "output": "y",
    "output_role": "other",
    "candidate_backend": "onnxruntime",
    "mean_abs_error": 0.0001,
    "mean_cosine": 0.99999,
    "min_cosine": 0.9999,
    "top1_agreement": None,
    "top1_accuracy_reference": None,
    "top1_accuracy_candidate": None,
    "top1_drop": None,
    "per_output_max_abs_error": {"y": 0.001},
    "nan_or_inf": False,
    "nonfinite_values": 0,
    "note": "",
}


def _variant(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "recipe": {"name": name, "label": name.title(), "steps": [], "backend": None},
        "precision": "fp32",
        "backend": "onnxruntime",
        "path": None,
        "steps": [],
        "accuracy": None,
        "within_budget": False,
        "budget_note": "",
        "ratio": None,
        "ratio_low": None,
        "ratio_high": None,
        "verdict": "",
        "speedup": None,
        "original_p50_ms": None,
        "variant_p50_ms": None,
        "error": None,
    } | fields


def _video_run(**fields: Any) -> dict[str, Any]:
    stream = {
        "source": "generated.mp4",
        "frame_rate": 25.0,
        "frames": 50,
        "dropped": 0,
        "fps": 24.8,
        "p50_ms": 3.1,
        "p99_ms": 9.5,
    }
    return {
        "streams": [
            stream | {"stream": 0, "offset_s": 0.0},
            stream | {"stream": 1, "offset_s": 2.0},
        ],
        "pacing": "realtime",
        "drop_policy": "drop_oldest",
        "decoder": "h264",
        "max_batch_size": 8,
        "timeout_ms": 2.0,
        "seconds": 2.02,
        "frames": 100,
        "dropped": 0,
        "fps": 49.6,
        "mean_batch_size": 1.6,
        "cpu": {
            "decode_s": 0.4,
            "inference_and_serving_s": 0.6,
            "decode_share": 0.4,
            "inference_share": 0.6,
            "method": "decode: per-thread CPU clock; inference: process CPU minus decode",
        },
    } | fields


STORED = {
    JobKind.benchmark: {
        "target": {
            "backend": "onnxruntime",
            "device": "cpu",
            "precision": "fp16",
            "execution_provider": None,
        },
        "output_check": {
            "passed": True,
            "precision": "fp16",
            "reference": "onnxruntime fp32 on cpu",
            "tolerance": {"min_cosine": 0.999, "max_rel_error": 0.02},
            "outputs": {"y": {"cosine_min": 0.99998, "finite": True}},
            "problems": [],
        },
        "runtime": {"providers": ["CPUExecutionProvider"], "intra_op_threads": 2},
        "warnings": [],
    },
    JobKind.compare: {
        "ratio": 0.98,
        "low": 0.97,
        "high": 0.99,
        "confidence": 0.95,
        "margin": 0.02,
        "verdict": "no significant difference",
        "pairs": 200,
        "duration_s": 2.1,
        "a_p50_ms": 1.0,
        "b_p50_ms": 0.98,
        "a_summary": {"p50_ms": 1.0},
        "b_summary": {"p50_ms": 0.98},
        "batch_size": 1,
        "threads": 2,
        "environment": {"cpu": "Test CPU"},
        "sentence": "B/A 0.98 (0.97-0.99): #2 tiny is no significant difference.",
        "contention": None,
        "candidate_model_id": 2,
        "candidate_name": "tiny",
    },
    JobKind.optimize: {
        "spec": {
            "recipes": ["graph", "int8_static"],
            "target_backend": "any",
            "budget": {"max_top1_drop": 0.01, "min_cosine": 0.99},
            "comparison": COMPARISON_SPEC,
            "accuracy_samples": 32,
            "accuracy_output": None,
            "pass_settings": {},
        },
        "data": "synthetic inputs (32 samples)",
        "variants": [
            _variant(
                "graph",
                path="/data/artifacts/jobs/3/graph/model.onnx",
                steps=[{"step": "graph", "details": {"nodes": 4}, "warnings": []}],
                accuracy=ACCURACY,
                within_budget=True,
                ratio=0.8,
                ratio_low=0.78,
                ratio_high=0.82,
                verdict="faster",
                speedup=1.25,
                original_p50_ms=1.0,
                variant_p50_ms=0.8,
                model_id=7,
            ),
            _variant("int8_static", error="Calibration failed: no data.", model_id=None),
        ],
        "chosen": "graph",
        "environment": {"cpu": "Test CPU"},
    },
    JobKind.latency_profile: {
        "profile": {
            "batch_sizes": [1, 2],
            "mean_ms": [2.0, 2.5],
            "p50_ms": [2.0, 2.4],
            "p99_ms": [2.5, 3.0],
            "quantiles_ms": [],
            "runs": [[1, 2.0], [2, 2.5]],
            "handoff_ms": 0.2,
            "backend": "onnxruntime",
            "environment": {},
        },
        "ceiling": 800.0,
        "best_batch": 2,
    },
    JobKind.batching_verify: {
        "measured": {
            "throughput": 199.5,
            "p50_ms": 3.0,
            "p90_ms": 4.0,
            "p99_ms": 6.0,
            "mean_ms": 3.2,
            "mean_queue_ms": 1.0,
            "mean_compute_ms": 2.2,
            "mean_batch_size": 1.4,
            "completed": 2000,
            "rejected": 0,
            "failed": 0,
            "offered_rate": 200.0,
            "saturated": False,
            "batch_histogram": {"1": 1200, "2": 400},
        },
        "requests": {
            "sent_ms": [0.0, 5.1],
            "queue_ms": [1.0, 0.9],
            "compute_ms": [2.0, 2.1],
            "latency_ms": [3.0, 3.0],
        },
        "errors": [],
        "p99_halves_ms": [5.9, 6.1],
        "batches": {"runner": {"1": [1200, 2.0], "2": [400, 2.5]}, "handoff_ms": 0.2},
    },
    JobKind.export: {
        "bundle": "/data/artifacts/jobs/9/tiny.zip",
        "size_bytes": 12345,
        "files": 11,
        "skipped": {"tensorrt": "No worker offers TensorRT."},
    },
    JobKind.video: {
        "model": "cnn.onnx",
        "backend": "onnxruntime",
        "input_shape": [1, 3, 16, 16],
        "batched": _video_run(max_batch_size=8, fps=49.6),
        "per_frame": _video_run(max_batch_size=1, fps=41.2),
        "speedup": 1.2,
        "capacity": {
            "streams": 3,
            "frame_rate": 25.0,
            "tried": {"1": True, "2": True, "4": False, "3": True},
            "rule": "every stream delivers >= 95% of its frame rate and its p99 latency is "
            "within one frame interval",
        },
        "clip": "generated",
    },
}


def test_the_table_covers_every_job_kind_exactly_once() -> None:
    assert set(JOB_KINDS) == set(JobKind)
    assert all(info.kind is kind for kind, info in JOB_KINDS.items())
    assert len({info.label for info in JOB_KINDS.values()}) == len(JobKind)


def test_task_names_are_the_ones_brokers_hold() -> None:
    names = {name for info in JOB_KINDS.values() for name in info.task_names}

    assert names == {f"optistudio.{name}" for kind in JobKind for name in kind.stored_names()}
    assert {
        "optistudio.benchmark",
        "optistudio.compare",
        "optistudio.optimize",
        "optistudio.profile",
        "optistudio.soak",
        "optistudio.batching_profile",
        "optistudio.batching_verify",
        "optistudio.export",
        "optistudio.video",
    } <= names


@pytest.mark.parametrize("kind", sorted(STORED, key=lambda k: k.value), ids=lambda k: k.value)
def test_a_result_stored_before_the_models_still_reads(kind: JobKind) -> None:
    info = JOB_KINDS[kind]

    result = info.parse_result(STORED[kind])

    assert isinstance(result, info.result)
    assert info.dump_result(result) == STORED[kind] | _verdicts_now(kind)


def _verdicts_now(kind: JobKind) -> dict[str, Any]:
    """The changes on the way back: an untimed variant's verdict was "" and is now None; a
    variant has a status (failed when it had an error), and its error text is the message of
    an error with the code "failed"."""
    if kind is JobKind.batching_verify:  # the realised rate, then the stored refit came later
        return {"measured": STORED[kind]["measured"] | {"realised_rate": None}, "prediction": None}
    if kind is JobKind.latency_profile:  # recalibration, hand-back times, idle extras and
        # the serving costs (light, then under load and the machinery's) came later
        later = {"calibration": None, "handoff_gaps_ms": [], "idle_extra_ms": []}
        later |= {"served_extra_ms": 0.0, "serving_delays_ms": []}
        later |= {"served_extra_load": [], "request_ms": 0.0}  # under load; with no model
        later |= {"serving_delays_rate": None, "serving_delays_load": []}  # answers' delays
        later |= {"unmeasured": {}}  # the probes that could not measure, and why
        later |= {"batched_rewrite": ""}  # a batch fixed at 1 timed through its rewrite
        later |= {"batch_refused": "", "instance_latency": []}  # instances measured later
        later |= {"timer_late_ms": []}  # the batching timer's wake-up lateness, later still
        later |= {"timed_rate": None, "timed_extra_ms": None, "timed_delays_ms": []}  # its costs
        later |= {"timed_load": [], "timed_batch": None}  # and with batches that fill
        later |= {"timed_calls": []}  # and every runner call's extra
        later |= {"probe_time_scale": 1.0}  # a full profile: quick ones came later
        later |= {"served_checks": []}  # the simulator against its own probes, later still
        later |= {"probe_speeds": []}  # and the machine's speed beside each probe
        return {"profile": STORED[kind]["profile"] | later}
    if kind is JobKind.video:  # decoding, detector boxes, totals' p50/p99, threads came later
        served = {"batched_rewrite": "", "instances": 1, "batch_refused": ""}  # fixed batches
        return (
            {"threads": None}
            | served
            | {run: _video_run_now(STORED[kind][run]) for run in ("batched", "per_frame")}
        )
    if kind is not JobKind.optimize:
        return {}
    spec = STORED[kind]["spec"]
    # the input fields (and the batch axes) came later, empty by default
    inputs = {"values": {}, "inputs_file": None, "batch_axes": {}}
    task = {"task": None, "budgets": {}, "speed_only": False}  # task budgets came later
    precisions = {"precision": "fp32", "candidate_precision": None}  # inference precisions too
    decoder = {"decoder": DecoderSettings().model_dump()}  # a decoder's settings came later
    unsteady = {"unsteady_timing": UnsteadyTiming().model_dump()}  # more rounds came later
    unsteady |= {"one_thread_when_busy": True}  # one-thread timing beside load came later
    return {
        "spec": spec
        | {
            "shapes": {},
            "dims": {},
            **inputs,
            "comparison": spec["comparison"] | inputs | precisions,
            "budget": spec["budget"] | {"floor_snr_db": 6.0},  # the numeric floor came later
        }
        | task
        | decoder
        | unsteady,
        "variants": [_variant_now(v) for v in STORED[kind]["variants"]],
        "notes": [],  # what the run chose and why (the INT8 weight range) came later
        "task": None,
        "task_reason": "",
        "task_confidence": None,  # how sure recognition was, and its reasons, came later
        "task_reasons": [],
        "task_budget": {},
        "headline": "",  # the run in one line, and the fastest variant left out, came later
        "left_out": None,
    }


def _video_run_now(stored: dict[str, Any]) -> dict[str, Any]:
    later = {"decoding": "software", "detector": None, "p50_ms": None, "p99_ms": None}
    return stored | later | {"streams": [s | {"boxes_per_frame": None} for s in stored["streams"]]}


def _variant_now(stored: dict[str, Any]) -> dict[str, Any]:
    error = stored["error"]
    judged = {"task": None, "task_reason": "", "task_mode": None, "task_metrics": {}, "worst": []}
    judged |= {"candidate_precision": "fp32"}  # the precision it ran at came later
    judged |= {"task_note": ""}  # how the task read the outputs came later too
    # the numeric floor, constant outputs and a task judged with low confidence came later
    judged |= {"constant_outputs": [], "task_confidence": None, "output_floors": {}}
    judged |= {"task_void": ""}
    accuracy = stored.get("accuracy")
    return stored | {
        "recipe": stored["recipe"] | {"precision": None},  # a recipe's inference precision too
        "accuracy": accuracy | judged if accuracy else accuracy,
        "calibrated_on_random": False,
        "builtin_samples": None,  # judged (and calibrated) on built-in samples came later
        "decoding": None,  # a decoder's TTFT, tokens/s and sizes came later
        "timing_note": "",  # what more rounds said came later
        "verdict": stored["verdict"] or None,
        "status": "failed" if error else "made",
        "error": {"code": "failed", "message": error, "hint": None, "detail": None}
        if error
        else None,
    }


def test_the_optimize_result_is_typed_down_to_each_variant() -> None:
    result = OPTIMIZE.parse_result(STORED[JobKind.optimize])

    graph, failed = result.variants
    assert isinstance(graph, StoredVariant) and graph.model_id == 7 and graph.verdict == "faster"
    assert failed.verdict is None and failed.model_id is None
    assert (graph.status, failed.status) == ("made", "failed")
    assert failed.error == ErrorInfo(code=ErrorCode.failed, message="Calibration failed: no data.")


def test_a_verify_result_keeps_its_runner_summary_by_batch_size() -> None:
    result = BATCHING_VERIFY.parse_result(STORED[JobKind.batching_verify])

    assert result.batches is not None and result.batches.runner == {1: (1200, 2.0), 2: (400, 2.5)}
    assert result.p99_halves_ms == (5.9, 6.1)


def test_a_verify_result_from_before_batches_were_recorded_reads() -> None:
    older = {
        k: v
        for k, v in STORED[JobKind.batching_verify].items()
        if k not in ("batches", "p99_halves_ms")
    }

    result = BATCHING_VERIFY.parse_result(older)

    assert result.batches is None and result.p99_halves_ms is None


def test_a_result_that_no_longer_reads_is_none_for_the_pages() -> None:
    assert EXPORT.read_result({"bundle": "x.zip"}) is None
    assert EXPORT.read_result(None) is None


def test_specs_parse_as_their_kinds_type() -> None:
    assert isinstance(BENCHMARK.parse_spec({}), BenchmarkSpec)
    assert isinstance(COMPARE.parse_spec({"candidate_model_id": 3}), CompareJobSpec)
    assert isinstance(OPERATOR_PROFILE.parse_spec({"runs": 3}), OperatorProfileJobSpec)


def test_a_spec_of_another_kind_is_refused_when_stored() -> None:
    with pytest.raises(TypeError, match="OptimizeJobSpec"):
        OPTIMIZE.dump_spec(SoakSpec())


@pytest.mark.parametrize(
    ("info", "spec", "target"),
    [
        (BENCHMARK, BenchmarkSpec(backend="openvino"), ("openvino", "cpu")),
        (COMPARE, CompareJobSpec(candidate_model_id=1, device="cuda:0"), ("onnxruntime", "cuda:0")),
        (OPTIMIZE, OptimizeJobSpec(), REFERENCE_TARGET),
        (OPTIMIZE, OptimizeJobSpec(target_backend="openvino"), ("openvino", "cpu")),
        (OPERATOR_PROFILE, OperatorProfileJobSpec(backend="openvino"), ("openvino", "cpu")),
        (LATENCY_PROFILE, LATENCY_PROFILE.spec(backend="openvino"), ("openvino", "cpu")),
        (EXPORT, EXPORT.spec(), REFERENCE_TARGET),
        (VIDEO, VideoJobSpec(backend="openvino"), ("openvino", "cpu")),
    ],
    ids=[
        "benchmark",
        "compare",
        "optimize-any",
        "optimize-openvino",
        "profile",
        "batching",
        "export",
        "video",
    ],
)
def test_each_kind_names_the_target_it_is_routed_to(info, spec, target) -> None:  # type: ignore[no-untyped-def]
    assert info.target(spec) == target


def test_a_video_spec_gives_the_engine_its_settings_and_nothing_of_the_job() -> None:
    spec = VIDEO.parse_spec({"streams": 3, "clip_path": "/d/x.mp4", "capacity": True})

    settings = spec.settings()

    assert settings.streams == 3 and not hasattr(settings, "clip_path")
    with pytest.raises(InvalidSpec, match="streams"):
        VIDEO.parse_spec({"streams": 0})
