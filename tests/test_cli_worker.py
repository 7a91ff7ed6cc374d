"""`optistudio worker --queues ...`: the flags reach both the Celery command line and the env."""

from __future__ import annotations

import pytest

from optistudio.cli import build_parser
from optistudio.cli.worker import worker_invocation
from optistudio.core.errors import OptistudioError


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPTISTUDIO_QUEUES", "cpu")
    monkeypatch.setenv("OPTISTUDIO_BROKER_URL", "redis://broker.example:6379/0")
    args = build_parser().parse_args(
        ["worker", "--queues", "gpu", "--concurrency", "1", "--backends", "tensorrt"]
    )

    command, env = worker_invocation(args)

    assert command[command.index("--queues") + 1] == "gpu"
    assert command[command.index("--concurrency") + 1] == "1"
    assert command[command.index("--hostname") + 1] == "gpu@%h"
    assert env["OPTISTUDIO_QUEUES"] == "gpu" and env["OPTISTUDIO_BACKENDS"] == "tensorrt"
    assert env["OPTISTUDIO_BROKER_URL"] == "redis://broker.example:6379/0"  # the rest passes on
    assert env["NNCF_CI"] == "1"


def test_without_flags_the_environment_decides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPTISTUDIO_QUEUES", "cpu,openvino")
    command, env = worker_invocation(build_parser().parse_args(["worker"]))
    assert command[command.index("--queues") + 1] == "cpu,openvino"
    assert env["OPTISTUDIO_QUEUES"] == "cpu,openvino"


def test_a_bad_flag_value_is_a_readable_error() -> None:
    args = build_parser().parse_args(["worker", "--concurrency", "0"])
    with pytest.raises(OptistudioError, match="worker_concurrency"):
        worker_invocation(args)
