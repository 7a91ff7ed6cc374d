"""The Batching page's latency profile form: the "Largest batch" it is given is the stored
job's `max_batch_size`, under that one name from the box to the spec the worker reads."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from optistudio.db.models import Job, JobKind
from optistudio.db.queries import record_worker
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import LATENCY_PROFILE
from tests.studio.conftest import view_page


def _live_worker(factory: Any) -> None:
    entry = {"available": True, "reason": "", "devices": ["cpu"], "precisions": ["fp32"]}
    with transaction(factory) as s:
        record_worker(
            s, hostname="w@test", queues=["cpu"], inventory={"backends": {"onnxruntime": entry}}
        )


def _jobs(factory: Any) -> list[Job]:
    with transaction(factory) as s:
        jobs = list(s.scalars(select(Job).order_by(Job.id)))
        s.expunge_all()
        return jobs


def test_the_largest_batch_asked_is_the_jobs_max_batch_size(  # type: ignore[no-untyped-def]
    db_factory, app_settings, make_model
) -> None:
    model_id = add_model_file(db_factory, app_settings, make_model(), name="m").model_id
    _live_worker(db_factory)
    at = view_page("optistudio.studio.views.batching", query={"model": str(model_id)}).run()
    (box,) = [n for n in at.number_input if n.label == "Largest batch"]

    box.set_value(4)
    next(b for b in at.button if b.label == "Profile").click().run()

    assert not at.exception, at.exception
    (job,) = _jobs(db_factory)
    assert job.kind is JobKind.latency_profile and job.model_id == model_id
    spec = LATENCY_PROFILE.parse_spec(job.spec)
    assert spec.max_batch_size == 4 and job.spec["max_batch_size"] == 4


def test_a_request_shape_that_does_not_read_is_refused_and_nothing_is_stored(  # type: ignore[no-untyped-def]
    db_factory, app_settings, make_model
) -> None:
    model_id = add_model_file(db_factory, app_settings, make_model(), name="m").model_id
    _live_worker(db_factory)
    at = view_page("optistudio.studio.views.batching", query={"model": str(model_id)}).run()
    (shapes,) = [t for t in at.text_input if t.label == "Request shape (optional)"]

    shapes.set_value("x=one,two")
    next(b for b in at.button if b.label == "Profile").click().run()

    assert not at.exception, at.exception
    assert _jobs(db_factory) == []
    assert [e.value for e in at.error if e.value.startswith("Bad shape 'x=one,two'")]


def test_a_quick_profile_is_asked_with_shortened_probes_and_a_full_one_by_default(  # type: ignore[no-untyped-def]
    db_factory, app_settings, make_model
) -> None:
    from optistudio.core.batching.latency import QUICK_PROBE_SCALE

    model_id = add_model_file(db_factory, app_settings, make_model(), name="m").model_id
    _live_worker(db_factory)
    at = view_page("optistudio.studio.views.batching", query={"model": str(model_id)}).run()
    next(b for b in at.button if b.label == "Profile").click().run()
    (quick,) = [c for c in at.checkbox if c.label == "Quick profile"]
    quick.check()
    next(b for b in at.button if b.label == "Profile").click().run()

    assert not at.exception, at.exception
    full, short = (LATENCY_PROFILE.parse_spec(job.spec) for job in _jobs(db_factory))
    assert full.probe_time_scale == 1.0 and short.probe_time_scale == QUICK_PROBE_SCALE < 1
