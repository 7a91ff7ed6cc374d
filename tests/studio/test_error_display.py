"""The studio's one way to show an error: message, then what to try, then the code, small."""

from __future__ import annotations

from typing import Any

import pytest
from streamlit.testing.v1 import AppTest

from optistudio.core.errors import ErrorCode, ErrorInfo, NoWorkerForTarget
from optistudio.db.models import JobKind, JobStatus
from optistudio.db.queries import create_job, finish_job
from optistudio.db.session import transaction
from optistudio.studio.errors import ShownError, shown_error
from optistudio.studio.job_view import JobView
from optistudio.studio.jobs_services import job_rows


def row(status: str, message: str, hint: str | None = None, code: str | None = None) -> JobView:
    return JobView(
        id=3, kind="Benchmark", status=status, message=message, error_hint=hint, error_code=code
    )


@pytest.mark.parametrize(
    ("source", "shown"),
    [
        (
            row("failed", "Op 'Foo' is not supported.", "Try the fp16 recipe.", "pass_failed"),
            ShownError(
                "error", "Op 'Foo' is not supported.", "Try the fp16 recipe.", "pass_failed"
            ),
        ),
        (
            row("timed_out", "Timed out.", "Make the run shorter.", "timeout"),
            ShownError("warning", "Timed out.", "Make the run shorter.", "timeout"),
        ),
        (
            row("cancelled", "Cancelled while running.", None, "cancelled"),
            ShownError("caption", "Cancelled while running.", None, "cancelled"),
        ),
        (
            row("failed", "Not an ONNX model. Upload an .onnx file."),
            ShownError("error", "Not an ONNX model. Upload an .onnx file.", None, None),
        ),
        (
            NoWorkerForTarget("No worker is running.", hint="Start one with `make up`."),
            ShownError("error", "No worker is running.", "Start one with `make up`.", "no_worker"),
        ),
    ],
    ids=["failed-job", "timed-out-job", "cancelled-job", "row-from-before-codes", "exception"],
)
def test_shown_error_keeps_message_hint_and_code_apart(source: Any, shown: ShownError) -> None:
    assert shown_error(source) == shown


def test_a_row_from_before_codes_is_shown_as_before() -> None:
    shown = shown_error(row("failed", "Bad file. Upload it again."), prefix="Job #3 failed: ")

    assert (shown.body, shown.code) == ("Job #3 failed: Bad file. Upload it again.", None)


def test_job_rows_carry_the_error_fields(db_factory) -> None:
    with transaction(db_factory) as s:
        job_id = create_job(s, kind=JobKind.benchmark, spec={}, model_id=None).id
        finish_job(
            s,
            job_id=job_id,
            status=JobStatus.failed,
            message="Calibration data does not fit.",
            error_code="data_mismatch",
            error_hint="Give inputs named x.",
        )

    [job] = job_rows(db_factory)

    assert shown_error(job).body == (
        "Calibration data does not fit.\n\n**What to try:** Give inputs named x."
    )
    assert shown_error(job).code == "data_mismatch"


def _page(source):  # AppTest runs its source alone: no annotations from this module
    from optistudio.studio.errors import show_error

    show_error(source, prefix="Job #7 failed: ")


def test_the_page_shows_the_message_the_hint_and_the_code() -> None:
    error = ErrorInfo(code=ErrorCode.model_rejected, message="Not ONNX.", hint="Upload .onnx.")
    at = AppTest.from_function(_page, args=(error,), default_timeout=30)

    at.run()

    assert not at.exception
    assert [e.value for e in at.error] == [
        "Job #7 failed: Not ONNX.\n\n**What to try:** Upload .onnx."
    ]
    assert [c.value for c in at.caption] == ["code: `model_rejected`"]
