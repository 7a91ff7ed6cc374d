"""Jobs without Streamlit: submit, cancel, and the one row every page reads a job as."""

from __future__ import annotations

from dataclasses import replace

import pytest

from optistudio.core.errors import NoWorkerForTarget
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.models import JobKind
from optistudio.services.catalog import add_model_file
from optistudio.services.jobkinds import BENCHMARK
from optistudio.studio.jobs_services import (
    BadSetting,
    Refused,
    Submitted,
    cancel_job,
    job_rows,
    job_spec,
    recent_jobs,
    submit,
    submit_benchmark,
)


@pytest.fixture
def model_id(db_factory, app_settings, tiny_model) -> int:
    return add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id


def test_cancel_outcomes(db_factory, model_id) -> None:
    revoked = []
    queued = submit_benchmark(
        db_factory, model_id=model_id, spec=BenchmarkSpec(), send=lambda name, args: "task-q"
    )

    first = cancel_job(db_factory, job_id=queued, revoke=revoked.append)
    again = cancel_job(db_factory, job_id=queued, revoke=revoked.append)

    assert first == f"Job {queued} is cancelled."
    assert revoked == ["task-q"]
    assert again == f"Job {queued} had already finished (cancelled)."
    assert cancel_job(db_factory, job_id=999, revoke=revoked.append) == "Job 999 does not exist."
    assert [r.status for r in job_rows(db_factory)] == ["cancelled"]


def test_the_jobs_page_and_the_other_pages_read_the_same_job_row(db_factory, model_id) -> None:
    sent: list[tuple[str, list]] = []
    spec = BenchmarkSpec(batch_sizes=[1, 2])
    job_id = submit_benchmark(
        db_factory, model_id=model_id, spec=spec, send=lambda n, a: sent.append((n, a)) or "t-1"
    )

    [listed] = job_rows(db_factory)
    [recent] = recent_jobs(db_factory, kind=JobKind.benchmark, model_id=model_id)

    assert recent == replace(listed, result=None)  # queued: no result yet
    assert (listed.id, listed.model, listed.status) == (job_id, "tiny", "queued")
    assert listed.kind == "Benchmark" and sent == [("optistudio.benchmark", [job_id])]
    assert job_spec(db_factory, job_id=job_id)["batch_sizes"] == [1, 2]
    assert job_spec(db_factory, job_id=job_id + 1) == {}


# -- the one submit path every page sends its jobs through ---------------------------------


def _routed(queues: list[str]):  # type: ignore[no-untyped-def]
    """A route that hands out the "cpu" queue, noting each (kind, spec) it was asked for."""

    def route(kind, spec) -> str:  # type: ignore[no-untyped-def]
        queues.append(f"{kind.kind.value}:{spec.backend}")
        return "cpu"

    return route


def _sender(sent: list[tuple[str, str, list]]):  # type: ignore[no-untyped-def]
    return lambda queue: lambda name, args: sent.append((queue, name, args)) or "task-1"


def test_submit_makes_the_spec_routes_it_and_sends_the_committed_row(db_factory, model_id) -> None:
    asked: list[str] = []
    sent: list[tuple[str, str, list]] = []

    outcome = submit(
        db_factory,
        BENCHMARK,
        model_id,
        lambda: BenchmarkSpec(batch_sizes=[1, 4]),
        route=_routed(asked),
        sender=_sender(sent),
    )

    assert isinstance(outcome, Submitted)
    assert outcome.spec.batch_sizes == [1, 4] and asked == ["benchmark:onnxruntime"]
    assert sent == [("cpu", "optistudio.benchmark", [outcome.job_id])]
    assert job_spec(db_factory, job_id=outcome.job_id)["batch_sizes"] == [1, 4]


def _unparsed() -> BenchmarkSpec:
    raise BadSetting("batch sizes must be integers, got 'x'")


@pytest.mark.parametrize(
    ("make_spec", "settings"),
    [
        pytest.param(lambda: BenchmarkSpec(min_runs=0), "min_runs: ", id="spec-does-not-validate"),
        pytest.param(_unparsed, "batch sizes must be integers, got 'x'", id="text-is-no-setting"),
    ],
)
def test_settings_that_make_no_spec_are_refused_before_any_row(  # type: ignore[no-untyped-def]
    db_factory, model_id, make_spec, settings
) -> None:
    asked: list[str] = []

    outcome = submit(
        db_factory, BENCHMARK, model_id, make_spec, route=_routed(asked), sender=_sender([])
    )

    assert isinstance(outcome, Refused) and outcome.error is None
    assert outcome.settings is not None and outcome.settings.startswith(settings)
    assert outcome.check("benchmark") == f"Check the benchmark settings: {outcome.settings}"
    assert outcome.check() == f"Check the settings: {outcome.settings}"
    assert asked == [] and job_rows(db_factory) == []


def test_a_route_with_no_worker_is_refused_with_its_error_and_no_row(db_factory, model_id) -> None:
    def nobody(kind, spec) -> str:  # type: ignore[no-untyped-def]
        raise NoWorkerForTarget("No worker is running.", hint="Start the stack with `make up`.")

    outcome = submit(
        db_factory, BENCHMARK, model_id, BenchmarkSpec, route=nobody, sender=_sender([])
    )

    assert isinstance(outcome, Refused) and outcome.settings is None
    assert isinstance(outcome.error, NoWorkerForTarget)
    assert outcome.error.info().hint == "Start the stack with `make up`."
    assert job_rows(db_factory) == []


def test_a_bug_while_making_the_spec_is_raised_not_refused(db_factory, model_id) -> None:
    def broken() -> BenchmarkSpec:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        submit(db_factory, BENCHMARK, model_id, broken, route=_routed([]), sender=_sender([]))
    assert job_rows(db_factory) == []
