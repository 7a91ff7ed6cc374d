"""`optistudio worker`: a Celery worker for this machine's queues.

Flags override the matching OPTISTUDIO_* settings, so a worker on another machine joins with one
line: `optistudio worker --queues gpu --concurrency 1 --backends tensorrt`, with the broker,
database and artifact-store settings in its environment.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from pydantic import ValidationError

from optistudio.core.errors import InvalidSpec, describe_validation_error

FLAGS = {
    # flag: (settings field, environment variable)
    "queues": ("queues", "OPTISTUDIO_QUEUES"),
    "concurrency": ("worker_concurrency", "OPTISTUDIO_WORKER_CONCURRENCY"),
    "backends": ("backends", "OPTISTUDIO_BACKENDS"),
}


def add_worker_parser(commands: Any) -> None:
    worker = commands.add_parser("worker", help="run a Celery worker for the configured queues")
    worker.add_argument("--queues", help="comma-separated queues, e.g. gpu (OPTISTUDIO_QUEUES)")
    worker.add_argument(
        "--concurrency",
        type=int,
        help="worker processes; 1 per GPU keeps figures clean (OPTISTUDIO_WORKER_CONCURRENCY)",
    )
    worker.add_argument("--backends", help="comma-separated backends (OPTISTUDIO_BACKENDS)")


def worker_invocation(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """The Celery command line and its environment. The flags go into the environment too, so
    the worker process (inventory, routing) sees what its command line says."""
    from optistudio.cli.launcher import worker_command
    from optistudio.services.settings import Settings
    from optistudio.services.telemetry import telemetry_off_env

    given = {flag: value for flag in FLAGS if (value := getattr(args, flag, None)) is not None}
    try:
        settings = Settings(**{FLAGS[flag][0]: value for flag, value in given.items()})
    except ValidationError as exc:
        raise InvalidSpec(
            f"Invalid worker setting: {describe_validation_error(exc)}",
            hint="See `optistudio worker --help` and the README's configuration table.",
        ) from None
    env = telemetry_off_env()
    env.update({FLAGS[flag][1]: str(value) for flag, value in given.items()})
    return worker_command(settings), env


def command_worker(args: argparse.Namespace) -> int:
    from optistudio.services.telemetry import opt_out_of_openvino

    command, env = worker_invocation(args)
    opt_out_of_openvino()  # its switch is a file in the home folder, not the environment
    os.execvpe(command[0], command, env)
    return 0  # pragma: no cover - exec does not return
