"""The query functions deletion uses, against migrated SQLite and PostgreSQL databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.config import Config
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from optistudio.db import queries
from optistudio.db.models import Job, JobKind, JobStatus, Measurement, Model
from optistudio.db.queries import MeasurementRow
from optistudio.db.session import make_session_factory, transaction

ALEMBIC_INI = Path(__file__).resolve().parents[2] / "alembic.ini"
ROWS = [
    MeasurementRow("onnxruntime", 1, 4, "latency_p50", 1.5, "ms"),
    MeasurementRow("onnxruntime", 8, 4, "latency_p50", 6.0, "ms"),
]


@pytest.fixture
def factory(database_url: str) -> Iterator[sessionmaker[Session]]:
    cfg = Config(str(ALEMBIC_INI))
    cfg.attributes.update(url=database_url, configure_logger=False)
    command.upgrade(cfg, "head")
    factory = make_session_factory(database_url)
    yield factory
    factory.kw["bind"].dispose()


def add_model(s: Session, letter: str, parent_id: int | None = None) -> int:
    model, _ = queries.get_or_create_model(
        s,
        sha256=letter * 64,
        name=f"m{letter}",
        filename="m.onnx",
        path=f"/data/{letter}.onnx",
        size_bytes=1,
        info={},
        parent_id=parent_id,
    )
    return model.id


def add_job(s: Session, model_id: int, spec: dict | None = None) -> int:
    job = queries.create_job(s, kind=JobKind.compare, spec=spec or {}, model_id=model_id)
    queries.replace_measurements(s, job_id=job.id, rows=ROWS)
    return job.id


@pytest.fixture
def family(factory: sessionmaker[Session]) -> dict[str, int]:
    """An original, its variant, the variant's own variant, and an unrelated model."""
    with transaction(factory) as s:
        original = add_model(s, "a")
        variant = add_model(s, "b", parent_id=original)
        grandchild = add_model(s, "c", parent_id=variant)
        other = add_model(s, "d")
    return {"original": original, "variant": variant, "grandchild": grandchild, "other": other}


def test_a_lineage_holds_every_variant_down_the_generations(factory, family) -> None:
    with transaction(factory) as s:
        whole = [m.id for m in queries.model_lineage(s, model_id=family["original"])]
        from_variant = [m.id for m in queries.model_lineage(s, model_id=family["variant"])]
        missing = queries.model_lineage(s, model_id=999)

    assert whole == [family["original"], family["variant"], family["grandchild"]]
    assert from_variant == [family["variant"], family["grandchild"]]
    assert missing == []


def test_jobs_of_models_include_those_naming_one_in_their_spec(factory, family) -> None:
    with transaction(factory) as s:
        own = add_job(s, family["variant"])
        as_candidate = add_job(s, family["other"], {"candidate_model_id": family["grandchild"]})
        unrelated = add_job(s, family["other"], {"candidate_model_id": family["other"]})
    ids = [family["variant"], family["grandchild"]]

    with transaction(factory) as s:
        by_model = [j.id for j in queries.jobs_of_models(s, model_ids=ids)]
        named = queries.jobs_of_models(
            s, model_ids=ids, spec_keys=["candidate_model_id", "variant_model_id"], for_update=True
        )

    assert by_model == [own]
    assert [j.id for j in named] == [own, as_candidate]
    assert unrelated not in [j.id for j in named]


def test_deleting_a_lineage_removes_its_jobs_measurements_and_models_only(factory, family) -> None:
    with transaction(factory) as s:
        kept_job = add_job(s, family["other"])
        gone_job = add_job(s, family["grandchild"])
    ids = [family["original"], family["variant"], family["grandchild"]]

    with transaction(factory) as s:
        jobs = queries.delete_jobs(s, job_ids=[gone_job])
        models = queries.delete_models(s, model_ids=ids)

    with transaction(factory) as s:
        assert (jobs, models) == (1, 3)
        assert [m.id for m in s.query(Model)] == [family["other"]]
        assert [j.id for j in s.query(Job)] == [kept_job]
        assert {m.job_id for m in s.query(Measurement)} == {kept_job}


def test_a_model_with_a_job_or_a_variant_left_is_refused_by_the_foreign_keys(
    factory, family
) -> None:
    with transaction(factory) as s:
        add_job(s, family["other"])

    for ids in ([family["other"]], [family["original"]]):
        with pytest.raises(IntegrityError), transaction(factory) as s:
            queries.delete_models(s, model_ids=ids)

    with transaction(factory) as s:
        assert s.query(Model).count() == 4


def test_jobs_mentioning_a_name_leave_out_the_ones_excluded(factory, family) -> None:
    name = "f" * 64 + ".npz"
    with transaction(factory) as s:
        first = add_job(s, family["other"], {"data_path": f"/x/datasets/{name}"})
        second = add_job(s, family["other"], {"nested": {"labels": [f"/y/datasets/{name}"]}})
        add_job(s, family["other"], {"data_path": "/x/datasets/other.npz"})

    with transaction(factory) as s:
        both = queries.jobs_mentioning(s, text=name)
        one = queries.jobs_mentioning(s, text=name, excluding=[first])
        none = queries.jobs_mentioning(s, text=name, excluding=[first, second])
        wildcard = queries.jobs_mentioning(s, text="%")

    assert (both, one, none, wildcard) == (2, 1, 0, 0)


def test_unfinished_jobs_are_the_queue_oldest_first(factory, family) -> None:
    with transaction(factory) as s:
        first, second, done = (add_job(s, family["other"]) for _ in range(3))
        queries.claim_job(s, job_id=second, worker="w1", task_id="t")
        queries.finish_job(s, job_id=done, status=JobStatus.succeeded)

    with transaction(factory) as s:
        queue = [(j.id, j.status) for j in queries.unfinished_jobs(s)]
        existing = queries.existing_job_ids(s, job_ids=[first, done, 999])

    assert queue == [(first, JobStatus.queued), (second, JobStatus.running)]
    assert existing == {first, done}
