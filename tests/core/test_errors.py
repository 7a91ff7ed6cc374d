"""The error shape: a code per kind, message and hint kept apart, one first-line helper."""

from __future__ import annotations

import pytest

from optistudio.core import errors
from optistudio.core.errors import (
    ErrorCode,
    ErrorInfo,
    InvalidSpec,
    OptistudioError,
    PassFailed,
    error_from,
    first_line,
)

KINDS = [
    value
    for value in vars(errors).values()
    if isinstance(value, type) and issubclass(value, OptistudioError)
]


def test_every_error_class_has_a_code_of_its_own() -> None:
    codes = [kind.code for kind in KINDS]

    assert all("code" in vars(kind) for kind in KINDS)
    assert len(set(codes)) == len(codes)
    assert ErrorCode.internal not in codes  # a bug is no OptistudioError


def test_info_keeps_message_and_hint_apart_and_str_glues_them_for_logs() -> None:
    error = PassFailed("Op 'Foo' is not supported by int8_static.", hint="Try the fp16 recipe.")

    info = error.info()

    assert info == ErrorInfo(
        code=ErrorCode.pass_failed,
        message="Op 'Foo' is not supported by int8_static.",
        hint="Try the fp16 recipe.",
    )
    assert info.model_dump(mode="json")["code"] == "pass_failed"
    assert str(error) == "Op 'Foo' is not supported by int8_static. Try the fp16 recipe."


def test_error_info_refuses_a_code_outside_the_closed_set() -> None:
    with pytest.raises(ValueError, match="code"):
        ErrorInfo(code="oops", message="m")


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (ErrorCode.invalid_spec, InvalidSpec),
        (ErrorCode.database_unavailable, OptistudioError),
        (ErrorCode.internal, OptistudioError),
    ],
    ids=["own-class", "no-class-database", "no-class-internal"],
)
def test_error_from_raises_a_stored_error_again_with_its_fields(
    code: ErrorCode, kind: type[OptistudioError]
) -> None:
    stored = ErrorInfo(code=code, message="What went wrong.", hint="What to try.")

    error = error_from(stored)

    assert type(error) is kind
    assert error.info() == stored


class _Wrapped(Exception):
    """Like SQLAlchemy's DBAPIError: the driver's own error in `orig`."""

    def __init__(self, orig: Exception) -> None:
        super().__init__(f"(wrapper) {orig}\n[SQL: SELECT 1]")
        self.orig = orig


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (RuntimeError("first\nsecond"), "first"),
        (RuntimeError(""), "RuntimeError"),
        (_Wrapped(OSError("server closed the connection\nmore")), "server closed the connection"),
        (ValueError("x" * 500), "x" * 400),
    ],
    ids=["multi-line", "empty", "wrapped-driver-error", "long"],
)
def test_first_line_is_the_one_line_a_person_reads(exc: BaseException, line: str) -> None:
    assert first_line(exc) == line
