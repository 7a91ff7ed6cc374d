"""Bring a database to the newest schema, under a file lock so two starts cannot race."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic import command
from alembic.config import Config
from filelock import FileLock

from optistudio import migrations

log = logging.getLogger(__name__)


def alembic_config(url: str) -> Config:
    """Alembic's configuration in code, so an installed wheel (no alembic.ini) migrates too."""
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    config.attributes["url"] = url
    config.attributes["configure_logger"] = False
    return config


def upgrade(url: str, *, lock_dir: Path) -> None:
    """`alembic upgrade head` for `url`, serialised across processes by a lock in `lock_dir`."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_dir / "migrate.lock"), timeout=300):
        log.info("migrating %s", _redacted(url))
        command.upgrade(alembic_config(url), "head")


def _redacted(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if "@" not in rest:
        return url
    return f"{scheme}{sep}***@{rest.split('@', 1)[1]}"
