"""A batching job reads its model's facts once: the card parsed from the row once and handed
down, the file never inspected again (a rewrite with a free batch, being another file, once).

The counts come from wrapping the real functions (`ModelInfo.model_validate`, intake's
inspection, `onnx.load`) on a real job run through `run_job` on a real database."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import onnx
import pytest

from optistudio.core.batching.latency import QUICK_PROBE_SCALE
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import BatchingVerifySpec, LatencyProfileSpec
from optistudio.core.model import intake
from optistudio.core.model.info import ModelInfo
from optistudio.db.models import JobKind, JobStatus
from tests.workers.conftest import finished_job

PROFILE = LatencyProfileSpec(max_batch_size=2, min_seconds=0.02, probe_time_scale=QUICK_PROBE_SCALE)
VERIFY = BatchingVerifySpec(
    settings=BatchingSettings(max_batch_size=2, timeout_ms=1), rate=50, seconds=0.2
)


def _counted(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Counts of card parses, inspections and ONNX file reads from now on."""
    reads: Counter[str] = Counter()

    def counting(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            reads[name] += 1
            return real(*args, **kwargs)

        return call

    validate = ModelInfo.model_validate.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(intake, "_inspect", counting("inspect", intake._inspect))
    monkeypatch.setattr(onnx, "load", counting("onnx.load", onnx.load))
    monkeypatch.setattr(ModelInfo, "model_validate", classmethod(counting("card", validate)))
    return reads


def test_a_batching_profile_job_reads_its_model_once(  # type: ignore[no-untyped-def]
    db_factory, store_model, make_model, monkeypatch
) -> None:
    model_id = store_model(make_model())
    reads = _counted(monkeypatch)

    job = finished_job(db_factory, JobKind.latency_profile, model_id, PROFILE)

    assert job.status == JobStatus.succeeded, job.message
    assert reads["card"] == 1, reads
    assert reads["inspect"] == 0, reads


def test_a_batching_verify_job_parses_its_card_once(  # type: ignore[no-untyped-def]
    db_factory, store_model, make_model, monkeypatch
) -> None:
    model_id = store_model(make_model())
    reads = _counted(monkeypatch)

    job = finished_job(db_factory, JobKind.batching_verify, model_id, VERIFY)

    assert job.status == JobStatus.succeeded, job.message
    assert reads["card"] == 1, reads


def test_a_batch_fixed_at_1_inspects_only_its_rewrite(  # type: ignore[no-untyped-def]
    db_factory, store_model, make_model, monkeypatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # a fresh rewrite, made here
    model_id = store_model(make_model(batch=1))
    reads = _counted(monkeypatch)

    job = finished_job(db_factory, JobKind.latency_profile, model_id, PROFILE)

    assert job.status == JobStatus.succeeded and "batched a rewrite" in job.message, job.message
    assert reads["card"] == 1, reads
    assert reads["inspect"] == 1, reads  # the rewrite: another file, with its batch free
