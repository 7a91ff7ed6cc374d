"""The Batching page's export: the settings a Verify measured (else the sliders'), written for
our runtime (pipeline.json) and for Triton Inference Server's dynamic batcher (config.pbtxt)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.triton import triton_config
from optistudio.core.model.info import ModelInfo


def verified_settings(
    settings: BatchingSettings,
    verify_jobs: list[dict[str, Any]],
    spec_of: Callable[[int], dict[str, Any]],
) -> tuple[BatchingSettings, str]:
    """The settings to export and a line saying where they come from: those the newest
    succeeded Verify (`recent_jobs` rows, newest first) served, its instance count among them,
    else the sliders'. `spec_of` reads a job's stored spec."""
    for job in verify_jobs:
        if job["status"] == "succeeded" and job.get("result") is not None:
            served = BatchingSettings.model_validate(spec_of(job["job"])["settings"])
            measured = job["result"].measured
            return served, (
                f"Exported as Verify job #{job['job']} served and measured them: max batch "
                f"{served.max_batch_size}, timeout {served.timeout_ms:g} ms, "
                f"{served.instances} instance(s): {measured.throughput:.1f} req/s, p99 "
                f"{measured.p99_ms:.1f} ms."
            )
    return settings, (
        "Not verified yet: exported as the sliders set them. Verify them first to export "
        "settings measured on this machine."
    )


def pipeline_json(name: str, backend: str, settings: BatchingSettings, shapes: dict) -> str:
    """The settings for our runtime: `Pipeline.load(model, BatchingSettings(**json['batching']))`."""
    document = {
        "model": name,
        "backend": backend,
        "shapes": shapes,
        "instances": settings.instances,
        "batching": settings.model_dump(mode="json"),
    }
    return json.dumps(document, indent=2) + "\n"


def triton_text(name: str, info: ModelInfo, settings: BatchingSettings) -> str:
    """Triton config.pbtxt for the settings (preferred sizes: the given ones, else max)."""
    return triton_config(
        _triton_name(name),
        info,
        max_batch_size=settings.max_batch_size,
        preferred_batch_sizes=settings.preferred_batch_sizes or [settings.max_batch_size],
        max_queue_delay_us=round(settings.timeout_ms * 1000),
        instances=settings.instances,
    )


def _triton_name(name: str) -> str:
    stem = name.rsplit(".", 1)[0] if name.endswith(".onnx") else name
    cleaned = "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in stem)
    return cleaned or "model"
