"""The task set on a model's card: checked, shared by variants, laid under every job that
leaves its own open, and shown beside what recognition reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.errors import InvalidSpec
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobKind
from optistudio.db.queries import create_job, get_job
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import OPTIMIZE, OptimizeJobSpec
from optistudio.services.model_tasks import (
    checked_task,
    load_task,
    recognized,
    save_task,
    task_label,
    task_names,
)
from optistudio.workers import outcome


@pytest.fixture
def model_ids(db_factory, app_settings, make_model) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    original = add_model_file(db_factory, app_settings, make_model("m.onnx"), name="m").model_id
    variant = add_model_file(
        db_factory,
        app_settings,
        make_model("v.onnx", features=8),
        name="v",
        origin="variant",
        parent_id=original,
    ).model_id
    return original, variant


def test_only_registered_tasks_and_none_may_be_set() -> None:
    assert "classification" in task_names() and task_names()[-1] == "none"
    assert checked_task("") is None and checked_task(None) is None
    assert checked_task("detection_boxes") == "detection_boxes"
    with pytest.raises(InvalidSpec, match="Unknown task 'boxes'") as caught:
        checked_task("boxes")
    assert "detection_boxes" in (caught.value.hint or "")


def test_a_task_set_on_a_variant_is_its_originals(db_factory, model_ids) -> None:  # type: ignore[no-untyped-def]
    original, variant = model_ids
    assert load_task(db_factory, variant) is None

    stored_on = save_task(db_factory, variant, "classification")

    assert stored_on == original
    assert load_task(db_factory, original) == load_task(db_factory, variant) == "classification"
    save_task(db_factory, original, "")
    assert load_task(db_factory, variant) is None


def _profiled(factory, model_id: int, spec):  # type: ignore[no-untyped-def]
    with transaction(factory) as s:
        job_id = create_job(
            s, kind=JobKind.optimize, spec=spec.model_dump(mode="json"), model_id=model_id
        ).id
    with transaction(factory) as s:
        job = get_job(s, job_id=job_id)
        _ = job.model  # loaded before the session closes, as the worker does
    fed = outcome.with_input_profile(factory, job, spec)
    with transaction(factory) as s:
        return fed, get_job(s, job_id=job_id).spec


def test_a_job_that_leaves_the_task_open_runs_in_the_cards_and_records_it(  # type: ignore[no-untyped-def]
    db_factory, model_ids
) -> None:
    original, variant = model_ids
    save_task(db_factory, original, "regression")

    fed, stored = _profiled(db_factory, variant, OptimizeJobSpec(recipes=["fusion"]))
    own, _ = _profiled(
        db_factory, variant, OptimizeJobSpec(recipes=["fusion"], task="classification")
    )
    untouched, _ = _profiled(db_factory, original, BenchmarkSpec())

    assert fed.task == "regression" and stored["task"] == "regression"
    assert own.task == "classification"  # the job's own task wins
    assert not hasattr(untouched, "task")  # a kind that judges nothing is left as it is
    assert OPTIMIZE.parse_spec(stored).task == "regression"


def test_the_card_reads_what_recognition_finds_with_its_confidence(tiny_model: Path) -> None:
    reading = recognized(tiny_model)

    assert reading.line().startswith(reading.label)
    if reading.task is None:
        assert reading.line().startswith("none recognized")
    else:
        assert reading.confidence in ("high", "medium", "low")
    assert task_label(None) == "recognized per job"
    assert task_label("none").startswith("none")
    assert task_label("classification") != "classification"  # the evaluator's label
