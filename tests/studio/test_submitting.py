"""A form's refusals as the page draws them (optistudio.studio.submitting), through the
Diagnostics page's memory soak and the Models page's benchmark in AppTest on a real migrated
database: text that is no setting and a spec that does not validate are one "Check the ...
settings" sentence, a target no live worker offers is the routing error with its hint and code;
none of them commits a job row."""

from __future__ import annotations

from typing import Any

import pytest

from optistudio.services.catalog import add_model_file
from optistudio.studio.jobs_services import job_rows
from tests.studio.conftest import view_page


def _soak(at: Any, batches: str) -> Any:
    next(t for t in at.text_input if t.label == "Batch sizes cycled").set_value(batches)
    return next(b for b in at.button if b.label == "Start soak").click().run()


def _benchmark(at: Any, field: str, text: str) -> Any:
    next(t for t in at.text_input if t.label == field).set_value(text)
    return next(b for b in at.button if b.label == "Benchmark").click().run()


def test_text_that_is_no_setting_is_one_sentence_and_no_job(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model
) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    at = view_page("optistudio.studio.views.diagnostics", query={"model": str(model_id)}).run()

    _soak(at, "1, x")

    assert not at.exception, at.exception
    assert [e.value for e in at.error] == [
        "Check the soak settings: invalid literal for int() with base 10: ' x'"
    ]
    assert not any(c.value.startswith("code:") for c in at.caption)
    assert job_rows(db_factory) == []


@pytest.mark.parametrize(
    ("field", "text", "said"),
    [
        pytest.param(
            "CPU cores (empty = any)",
            "0, a",
            "Check the benchmark settings: CPU cores must be integers separated by commas, "
            "got '0, a'",
            id="text-is-no-setting",
        ),
        pytest.param(
            "Batch sizes",
            "0",
            "Check the benchmark settings: settings: Value error, batch_sizes must be positive",
            id="spec-does-not-validate",
        ),
    ],
)
def test_a_benchmark_the_spec_refuses_is_one_sentence_and_no_job(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model, field: str, text: str, said: str
) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    at = view_page("optistudio.studio.views.models", query={"model": str(model_id)}).run()

    _benchmark(at, field, text)

    assert not at.exception, at.exception
    assert [e.value[: len(said)] for e in at.error] == [said]
    assert job_rows(db_factory) == []


def test_no_live_worker_is_the_routing_error_with_its_hint(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model
) -> None:
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id
    at = view_page("optistudio.studio.views.diagnostics", query={"model": str(model_id)}).run()

    _soak(at, "1, 2")

    assert not at.exception, at.exception
    [error] = [e.value for e in at.error]
    assert error.startswith("No worker is running, so the job cannot be started.")
    assert "**What to try:** Start the stack with `make up`" in error
    assert "code: `no_worker`" in [c.value for c in at.caption]
    assert job_rows(db_factory) == []
