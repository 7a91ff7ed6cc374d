"""`optistudio up`'s options: each sets one of the settings the stack starts with.

An option given wins over its OPTISTUDIO_* variable (the README's configuration table); one not
given leaves the variable, or the default, as it was, so `make up` runs as before.
`optistudio up --help` names each option's variable and default.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from optistudio.cli.exposure import check_exposure
from optistudio.cli.stack_settings import env_name
from optistudio.core.errors import InvalidSpec, describe_validation_error
from optistudio.services.settings import Settings


@dataclass(frozen=True)
class UpOption:
    """One option of `up`: its flag, the settings field it sets, what it means, its type
    (`metavar` None: a switch that sets the field to True)."""

    flag: str
    field: str
    what: str
    metavar: str | None
    type: Callable[[str], Any] = str

    @property
    def help(self) -> str:
        default = Settings.model_fields[self.field].default
        if isinstance(default, Path) and not default.is_absolute():
            default = f"./{default}"
        shown = f"; default {default}" if str(default) else ""
        return f"{self.what} ({env_name(self.field)}{shown})"


OPTIONS = (
    UpOption("--host", "host", "address the studio listens on", "HOST"),
    UpOption("--port", "ui_port", "studio port; 0 picks a free one", "PORT", int),
    UpOption(
        "--data-dir", "data_dir", "folder for the database, artifacts and Redis data", "DIR", Path
    ),
    UpOption("--database-url", "database_url", "SQLAlchemy URL; empty: SQLite in DIR", "URL"),
    UpOption("--redis-port", "redis_port", "embedded Redis port; 0 picks a free one", "PORT", int),
    UpOption("--concurrency", "worker_concurrency", "worker processes", "N", int),
    UpOption("--queues", "queues", "comma-separated queues the worker consumes", "LIST"),
    UpOption(
        "--backends", "backends", "comma-separated backends the worker offers; empty: all", "LIST"
    ),
    UpOption("--max-upload-mb", "max_upload_mb", "largest model file accepted", "MB", int),
    UpOption(
        "--allow-open",
        "allow_open",
        "serve a --host beyond this machine with no password and no OpenID Connect",
        None,
    ),
)
"""One option per field of `STACK_SETTINGS`, in its order."""


def add_up_parser(commands: Any) -> None:
    up = commands.add_parser(
        "up",
        help="migrate and run Redis, a worker and the studio",
        description="Migrate the database, then run Redis, one Celery worker and the studio "
        "until Ctrl-C. Each option overrides the environment variable named beside it.",
    )
    for option in OPTIONS:
        up.add_argument(option.flag, dest=option.field, help=option.help, **_takes(option))


def _takes(option: UpOption) -> dict[str, Any]:
    """What the option reads: a value of its type, or nothing (a switch: True when given)."""
    if option.metavar is None:
        return {"action": "store_const", "const": True}
    return {"type": option.type, "metavar": option.metavar}


def up_settings(args: argparse.Namespace) -> Settings:
    """The settings `up` runs with: the options given, over the environment's."""
    given = {o.field: value for o in OPTIONS if (value := getattr(args, o.field, None)) is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        raise InvalidSpec(
            f"Invalid setting for up: {describe_validation_error(exc)}",
            hint="See `optistudio up --help` and the README's configuration table.",
        ) from None


def command_up(args: argparse.Namespace) -> int:
    from optistudio.cli.launcher import up

    settings = up_settings(args)
    check_exposure(settings)
    logging.getLogger("optistudio").setLevel(logging.INFO)
    return up(settings)
