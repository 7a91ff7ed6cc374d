"""The Batching page's export: the settings a Verify measured (else the sliders'), written for
our runtime (pipeline.json v1, the same schema and writer as the export bundle's) and for Triton
Inference Server's dynamic batcher (config.pbtxt)."""

from __future__ import annotations

from optistudio.core.batching.pipeline_file import ServingSetting, pipeline_text
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import LatencyProfileSpec
from optistudio.core.batching.triton import triton_config
from optistudio.core.model.info import ModelInfo
from optistudio.services.jobresults import BatchingVerifyJobResult
from optistudio.studio.job_view import JobView


def verified_serving(
    settings: BatchingSettings, verify_jobs: list[JobView[BatchingVerifyJobResult]]
) -> ServingSetting:
    """The setting to export, with a note saying where it comes from: the one the newest
    succeeded Verify (`recent_jobs`, newest first) served (its stored spec's settings), its
    instance count among them, else the sliders'."""
    for job in verify_jobs:
        if job.succeeded and job.result is not None:
            served = BatchingSettings.model_validate(job.spec["settings"])
            measured = job.result.measured
            note = (
                f"Exported as Verify job #{job.id} served and measured them: max batch "
                f"{served.max_batch_size}, timeout {served.timeout_ms:g} ms, "
                f"{served.instances} instance(s): {measured.throughput:.1f} req/s, p99 "
                f"{measured.p99_ms:.1f} ms."
            )
            return _serving(served, "verified", note, job.id)
    note = (
        "Not verified yet: exported as the sliders set them. Verify them first to export "
        "settings measured on this machine."
    )
    return _serving(settings, "sliders", note, None)


def _serving(settings: BatchingSettings, source: str, note: str, job: int | None) -> ServingSetting:
    extra = {"source": source, "note": note, "job": job, "verify_job": job}
    return ServingSetting.model_validate(settings.model_dump() | extra)


def pipeline_json(
    name: str, info: ModelInfo, served: LatencyProfileSpec, serving: ServingSetting
) -> str:
    """pipeline.json v1 for the setting (`optistudio.core.batching.pipeline_file`): the model
    file `<name>.onnx` beside it, on the backend, device and threads the profile ran, read back
    by `PipelineOptimizer.from_file` and `optistudio serve`."""
    profile = {"shapes": served.shapes, "values": served.values}
    if not (served.shapes or served.values):
        profile = None
    return pipeline_text(
        {
            "written_by": "batching_page",
            "name": _triton_name(name),
            "model": f"{_triton_name(name)}.onnx",
            "backend": served.backend,
            "device": served.device,
            "threads": served.threads,
            "opsets": info.opsets,
            "inputs": [t.model_dump() for t in info.inputs],
            "outputs": [t.model_dump() for t in info.outputs],
            "input_profile": profile,
            "serving": serving.model_dump(),
        }
    )


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
