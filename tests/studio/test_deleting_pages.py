"""Deleting in the studio, through Streamlit's AppTest against a real migrated SQLite database
and artifact folder: the Models page's disk use and delete (with its confirmation), the Jobs
page's delete and queue note, and a share link whose results were deleted since."""

from __future__ import annotations

from typing import Any

import pytest
from compare_seed import Seeded, seed
from streamlit.testing.v1 import AppTest

from optistudio.db.models import JobKind
from optistudio.db.queries import claim_job, create_job, get_model, list_models, record_worker
from optistudio.db.session import transaction
from optistudio.services.artifact_store import model_folder
from optistudio.services.deletion import delete_model, plan_model_deletion
from optistudio.studio.compare_services import Selection, build_snapshot, share_snapshot
from optistudio.studio.deletion_services import deleted_note, disk_use
from tests.studio.conftest import app_page, view_page


@pytest.fixture
def seeded(db_factory, app_settings, make_model) -> Seeded:
    """An original, its variant, an optimize job and three benchmarks (one on the variant)."""
    return seed(
        db_factory, app_settings, make_model("tiny.onnx"), make_model("v.onnx", features=12)
    )


def _button(at: AppTest, label: str) -> Any:
    return next(b for b in at.button if b.label == label)


def test_the_models_page_shows_disk_use_and_deletes_after_confirming(
    db_factory, app_settings, seeded, fresh_studio
) -> None:
    plan = plan_model_deletion(db_factory, app_settings, model_id=seeded.original)
    folder = model_folder(app_settings.artifact_dir, _sha(db_factory, seeded.original))
    at = view_page("optistudio.studio.views.models", query={"model": str(seeded.original)})
    at.run()
    assert not at.exception, at.exception
    assert any(c.value.startswith(disk_use(plan)) for c in at.caption)

    _button(at, "Delete model…").click().run()
    warning = next(w.value for w in at.warning if w.value.startswith("Deletes model"))
    assert warning.startswith(f"Deletes model #{seeded.original} tiny: 1 variant, 4 results, ")
    assert "cannot be undone" in warning
    assert folder.is_dir()  # asking deletes nothing

    _button(at, "Delete for good").click().run()

    assert not at.exception, at.exception
    assert at.success[0].value.startswith(f"Deleted model #{seeded.original} tiny: freed ")
    assert any("No models yet" in i.value for i in at.info)
    assert not folder.exists()
    with transaction(db_factory) as s:
        assert list_models(s) == []


def test_a_model_with_a_running_job_is_not_deleted_and_the_page_says_why(
    db_factory, app_settings, seeded, fresh_studio
) -> None:
    with transaction(db_factory) as s:
        job = create_job(s, kind=JobKind.benchmark, spec={}, model_id=seeded.variant)
        claim_job(s, job_id=job.id, worker="celery@box", task_id="t")
    at = view_page("optistudio.studio.views.models", query={"model": str(seeded.original)})
    at.run()

    _button(at, "Delete model…").click().run()

    assert not at.exception, at.exception
    shown = " ".join(e.value for e in [*at.error, *at.warning])
    assert f"Job {job.id} is running: cancel it first. Nothing was deleted." in shown
    with transaction(db_factory) as s:
        assert get_model(s, model_id=seeded.original) is not None


def test_the_jobs_page_deletes_a_finished_job_and_places_a_queued_one(
    db_factory, app_settings, seeded, fresh_studio
) -> None:
    from optistudio.core.measure.benchmark import BenchmarkSpec
    from optistudio.studio.jobs_services import submit_benchmark

    running, _queued = (
        submit_benchmark(
            db_factory, model_id=seeded.original, spec=BenchmarkSpec(), send=lambda n, a: "t-q"
        )
        for _ in range(2)
    )
    with transaction(db_factory) as s:
        record_worker(s, hostname="celery@box", queues=["cpu"], inventory={})
        claim_job(s, job_id=running, worker="celery@box", task_id="t")
    at = view_page("optistudio.studio.views.jobs", function="live_jobs")
    at.run()
    assert not at.exception, at.exception
    assert any(
        c.value.startswith(f"Queued behind 1 job (#{running}): worker celery@box is busy")
        for c in at.caption
    )

    _button_with_key(at, "delete-job-1").click().run()
    assert any(w.value.startswith("Deletes job #1: 1 result, 1 job") for w in at.warning)
    _button(at, "Delete for good").click().run()

    assert not at.exception, at.exception
    assert at.success[0].value.startswith("Deleted job #1: freed 1 result, 1 job")
    assert not [b for b in at.button if b.key == "delete-job-1"]


def test_a_share_link_says_which_of_its_results_were_deleted(
    db_factory, app_settings, seeded, fresh_studio
) -> None:
    snapshot, _ = build_snapshot(db_factory, Selection(keys=seeded.keys[:2]))
    token = share_snapshot(db_factory, snapshot, owner="local")
    delete_model(db_factory, app_settings, model_id=seeded.variant)

    partly = _shared(token)
    delete_model(db_factory, app_settings, model_id=seeded.original)
    wholly = _shared(token)

    variant_label = snapshot.rows[1].label
    assert partly[0].startswith("1 of these 2 results were deleted after this link was made")
    assert variant_label in partly[0] and snapshot.rows[0].label not in partly[0]
    assert wholly[0].startswith("These results were deleted after this link was made.")


def test_the_deleted_note_reads_for_one_result_and_none() -> None:
    assert deleted_note([], 3) is None
    assert (deleted_note(["#4 tiny"], 1) or "").startswith("This result was deleted after")


def _shared(token: str) -> list[str]:
    """The share page's warnings about deleted results (it still renders the snapshot)."""
    at = app_page(query={"share": token})
    at.run()
    assert not at.exception, at.exception
    assert len(at.get("plotly_chart")) == 3  # the frozen figures are still shown
    return [w.value for w in at.warning if "deleted" in w.value]


def _button_with_key(at: AppTest, key: str) -> Any:
    return next(b for b in at.button if b.key == key)


def _sha(factory: Any, model_id: int) -> str:
    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        assert model is not None
        return model.sha256
