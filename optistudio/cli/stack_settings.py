"""The settings `optistudio up` starts its processes with, and the variable each is read from.

`up`'s options set exactly these (`optistudio/cli/up.py`), and the launcher hands each to every
child in its environment variable, so the worker and the studio run with what `up` was given,
whether by option or by variable.
"""

from __future__ import annotations

from optistudio.services.settings import Settings

STACK_SETTINGS = (
    "host",
    "ui_port",
    "data_dir",
    "database_url",
    "redis_port",
    "worker_concurrency",
    "queues",
    "backends",
    "max_upload_mb",
    "allow_open",
)
"""Settings fields, in the order `up --help` lists their options."""


def env_name(field: str) -> str:
    """The environment variable of a settings field: `ui_port` -> `OPTISTUDIO_UI_PORT`."""
    return f"{Settings.model_config.get('env_prefix', '')}{field.upper()}"


def settings_env(settings: Settings) -> dict[str, str]:
    """The stack's settings as the environment variables a child process reads them from."""
    return {env_name(field): str(getattr(settings, field)) for field in STACK_SETTINGS}
