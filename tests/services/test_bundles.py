"""What the bundle is told from the database: the batching settings the newest Verify served."""

from __future__ import annotations

from pathlib import Path

from optistudio.core.batching.settings import BatchingSettings
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import create_job
from optistudio.db.session import transaction
from optistudio.services.bundles import bundle_source
from optistudio.services.catalog import add_model_file


def _verify(factory, model_id: int, settings: BatchingSettings, status: JobStatus) -> int:  # type: ignore[no-untyped-def]
    spec = {"settings": settings.model_dump(mode="json"), "rate": 10.0}
    with transaction(factory) as s:
        job = create_job(s, kind=JobKind.batching_verify, spec=spec, model_id=model_id)
        job.status = status
        return job.id


def test_the_bundle_serves_what_the_newest_successful_verify_measured(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model: Path
) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    first = bundle_source(db_factory, app_settings, model_id).serving
    assert first is not None and first["source"] == "default"  # no measurement yet, said so

    older = BatchingSettings(max_batch_size=4, instances=1)
    newer = BatchingSettings(max_batch_size=8, instances=2)
    _verify(db_factory, model_id, older, JobStatus.succeeded)
    newest = _verify(db_factory, model_id, newer, JobStatus.succeeded)
    _verify(db_factory, model_id, BatchingSettings(max_batch_size=16), JobStatus.failed)

    serving = bundle_source(db_factory, app_settings, model_id).serving

    assert serving is not None and serving["verify_job"] == newest
    assert serving["max_batch_size"] == 8 and serving["instances"] == 2
