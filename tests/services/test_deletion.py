"""Deleting a model (its variants, results, jobs and files), a result or a job, against a real
migrated SQLite database and artifact folder; models stored through the catalogue."""

from __future__ import annotations

import copy
import io
from pathlib import Path
from typing import Any

import pytest
from test_jobkinds import STORED

from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import (
    MeasurementRow,
    claim_job,
    create_job,
    finish_job,
    get_model,
    jobs_by_ids,
    replace_measurements,
    set_job_result,
)
from optistudio.db.session import transaction
from optistudio.services.artifact_store import model_folder
from optistudio.services.catalog import add_model_file, store_dataset
from optistudio.services.deletion import (
    DeleteRefused,
    delete_job,
    delete_model,
    megabytes,
    plan_job_deletion,
    plan_model_deletion,
)
from optistudio.services.jobkinds import OPTIMIZE

ROWS = [MeasurementRow("onnxruntime", b, 1, "latency_p50", 1.0, "ms") for b in (1, 2, 4)]


def add_job(
    factory: Any,
    model_id: int,
    *,
    kind: JobKind = JobKind.benchmark,
    spec: dict[str, Any] | None = None,
    status: JobStatus = JobStatus.succeeded,
) -> int:
    """A job as a worker leaves it: measured and finished (or claimed, or left queued)."""
    with transaction(factory) as s:
        job_id = create_job(s, kind=kind, spec=spec or {}, model_id=model_id).id
        if status is not JobStatus.queued:
            claim_job(s, job_id=job_id, worker="w1", task_id=f"t{job_id}")
        if status is JobStatus.succeeded:
            replace_measurements(s, job_id=job_id, rows=ROWS)
        if status not in (JobStatus.queued, JobStatus.running):
            finish_job(s, job_id=job_id, status=status, message="done")
    return job_id


def job_folder(settings: Any, job_id: int, size: int = 5000) -> Path:
    """A job's output folder with one file, as the optimize and export workers write it."""
    folder = settings.artifact_dir / "jobs" / str(job_id)
    folder.mkdir(parents=True)
    (folder / "out.bin").write_bytes(b"x" * size)
    return folder


@pytest.fixture
def stored(db_factory: Any, app_settings: Any, make_model: Any) -> dict[str, Any]:
    """An original with a variant, jobs on both (one naming the variant from another model),
    a job folder, a data file the original's job shares with another model's job."""
    original = add_model_file(db_factory, app_settings, make_model("a.onnx"), name="a").model_id
    variant = add_model_file(
        db_factory, app_settings, make_model("b.onnx", features=8), name="a · int8",
        origin="variant", parent_id=original,
    ).model_id  # fmt: skip
    other = add_model_file(db_factory, app_settings, make_model("c.onnx", features=4), name="c")
    data = store_dataset(app_settings, io.BytesIO(b"calibration"), filename="calib.npz")
    bench = add_job(db_factory, original, spec={"data_path": str(data)})
    failed = add_job(db_factory, variant, status=JobStatus.failed)
    compare = add_job(
        db_factory, other.model_id, kind=JobKind.compare, spec={"candidate_model_id": variant}
    )
    sharing = add_job(db_factory, other.model_id, spec={"data_path": str(data)})
    return {
        "original": original, "variant": variant, "other": other.model_id, "data": data,
        "bench": bench, "failed": failed, "compare": compare, "sharing": sharing,
        "folder": job_folder(app_settings, bench),
    }  # fmt: skip


def test_the_plan_counts_what_goes_and_the_bytes_it_frees(db_factory, app_settings, stored) -> None:
    folders = [model_folder(app_settings.artifact_dir, _sha(db_factory, i)) for i in (1, 2)]

    plan = plan_model_deletion(db_factory, app_settings, model_id=stored["original"])

    assert plan.model_ids == [stored["original"], stored["variant"]] and plan.variants == 1
    assert plan.job_ids == [stored["bench"], stored["failed"], stored["compare"]]
    assert plan.result_ids == [stored["bench"], stored["compare"]]
    assert plan.measurements == 2 * len(ROWS)
    assert plan.bytes_by_part == {
        "model": _bytes(folders[0]), "variants": _bytes(folders[1]), "jobs": 5000, "data": 0
    }  # fmt: skip
    assert plan.freed() == f"1 variant, 2 results, 3 jobs, {megabytes(plan.bytes_on_disk)} on disk"
    assert plan.sentence().startswith(f"Deletes model #{stored['original']} a: 1 variant")


def test_deleting_a_model_removes_its_rows_then_its_files_and_keeps_shared_data(
    db_factory, app_settings, stored
) -> None:
    folders = [model_folder(app_settings.artifact_dir, _sha(db_factory, i)) for i in (1, 2)]

    delete_model(db_factory, app_settings, model_id=stored["original"])

    with transaction(db_factory) as s:
        assert get_model(s, model_id=stored["original"]) is None
        assert get_model(s, model_id=stored["variant"]) is None
        assert get_model(s, model_id=stored["other"]) is not None
        left = [j.id for j in jobs_by_ids(s, job_ids=range(1, 10))]
    assert left == [stored["sharing"]]  # the comparison naming the variant went with it
    assert not any(folder.exists() for folder in folders) and not stored["folder"].exists()
    assert stored["data"].is_file()  # another model's job still uses it
    assert model_folder(app_settings.artifact_dir, _sha(db_factory, stored["other"])).is_dir()


def test_a_data_file_goes_with_the_last_job_that_names_it(db_factory, app_settings, stored) -> None:
    first = plan_job_deletion(db_factory, app_settings, job_id=stored["bench"])
    delete_model(db_factory, app_settings, model_id=stored["original"])

    last = delete_job(db_factory, app_settings, job_id=stored["sharing"], result=True)

    assert first.bytes_by_part["data"] == 0
    assert last.bytes_by_part["data"] == len(b"calibration")
    assert not stored["data"].exists()


@pytest.mark.parametrize("status", [JobStatus.running, JobStatus.queued], ids=lambda s: s.value)
def test_an_unfinished_job_refuses_the_delete_and_nothing_goes(
    db_factory, app_settings, stored, status
) -> None:
    busy = add_job(db_factory, stored["variant"], status=status)

    with pytest.raises(DeleteRefused) as refused:
        delete_model(db_factory, app_settings, model_id=stored["original"])

    assert refused.value.message == (
        f"Job {busy} is {status.value}: cancel it first. Nothing was deleted."
    )
    assert "Jobs page" in (refused.value.hint or "")
    with transaction(db_factory) as s:
        assert get_model(s, model_id=stored["variant"]) is not None
        assert len(jobs_by_ids(s, job_ids=[stored["bench"], busy])) == 2
    assert stored["folder"].is_dir()


def test_a_result_is_a_succeeded_job_and_a_failed_job_has_none(
    db_factory, app_settings, stored
) -> None:
    with pytest.raises(DeleteRefused, match="has no result to delete"):
        delete_job(db_factory, app_settings, job_id=stored["failed"], result=True)

    gone = delete_job(db_factory, app_settings, job_id=stored["failed"])
    result = delete_job(db_factory, app_settings, job_id=stored["bench"], result=True)

    assert (gone.job_ids, gone.result_ids) == ([stored["failed"]], [])
    assert result.subject == f"the result of job #{stored['bench']}"
    assert not stored["folder"].exists()
    with pytest.raises(DeleteRefused, match=f"No job #{stored['bench']} is stored"):
        delete_job(db_factory, app_settings, job_id=stored["bench"])


def test_deleting_an_optimize_job_keeps_the_variants_it_stored(
    db_factory, app_settings, stored
) -> None:
    job = add_job(db_factory, stored["original"], kind=JobKind.optimize)
    with transaction(db_factory) as s:
        set_job_result(s, job_id=job, result=_optimize_result(stored["variant"]))

    done = delete_job(db_factory, app_settings, job_id=job)

    assert done.kept == [
        f"The variants it stored stay as models (#{stored['variant']}); delete them on the "
        "Models page."
    ]
    with transaction(db_factory) as s:
        assert get_model(s, model_id=stored["variant"]) is not None


def test_a_missing_model_is_refused_by_name(db_factory, app_settings) -> None:
    with pytest.raises(DeleteRefused, match=r"No model #42 is stored\."):
        plan_model_deletion(db_factory, app_settings, model_id=42)


@pytest.mark.parametrize(
    ("size", "said"),
    [(0, "0 MB"), (688, "0.7 kB"), (99_999, "100.0 kB"), (12_345_678, "12.3 MB")],
)
def test_sizes_read_as_a_person_reads_them(size: int, said: str) -> None:
    assert megabytes(size) == said


def _sha(factory: Any, model_id: int) -> str:
    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        assert model is not None
        return model.sha256


def _bytes(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def _optimize_result(variant_id: int) -> dict[str, Any]:
    """The optimize result the job-table test keeps as a worker stored it, its made variant
    stored as `variant_id`."""
    stored = copy.deepcopy(STORED[JobKind.optimize])
    stored["variants"][0]["model_id"] = variant_id
    return OPTIMIZE.dump_result(OPTIMIZE.parse_result(stored))
