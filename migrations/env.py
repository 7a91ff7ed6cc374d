"""Alembic environment: online and offline runs, SQLite in batch mode.

The database URL comes from ``config.attributes["url"]``, else a ``sqlalchemy.url`` option,
else ``OPTISTUDIO_DATABASE_URL``. A caller may instead pass an open connection in
``config.attributes["connection"]`` (on SQLite, one with ``PRAGMA foreign_keys=OFF``).
"""

from __future__ import annotations

import os
from logging.config import fileConfig
from typing import Any

from alembic import context
from sqlalchemy import Connection

from optistudio.db.models import Base, UtcDateTime
from optistudio.db.session import make_engine

URL_ENV_VAR = "OPTISTUDIO_DATABASE_URL"

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    """The URL to migrate, from the sources listed in the module docstring."""
    url = (
        config.attributes.get("url")
        or config.get_main_option("sqlalchemy.url")
        or os.environ.get(URL_ENV_VAR)
    )
    if not url:
        raise RuntimeError(
            "No database URL to migrate. Set config.attributes['url'] when calling Alembic "
            f"from Python, or the {URL_ENV_VAR} environment variable on the command line, "
            "e.g. sqlite:///data/optistudio.db"
        )
    return str(url)


def render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
    """Render our column types as plain SQLAlchemy ones, so scripts never import optistudio.db.models."""
    if type_ == "type" and isinstance(obj, UtcDateTime):
        return "sa.DateTime(timezone=True)"
    return False


def _configure_options(dialect_name: str) -> dict[str, Any]:
    is_sqlite = dialect_name == "sqlite"
    return {
        "target_metadata": target_metadata,
        "compare_type": True,
        "render_as_batch": is_sqlite,
        "render_item": render_item,
        # optistudio.db.session emits a real BEGIN on SQLite, so its DDL can be rolled back too.
        "transactional_ddl": True if is_sqlite else None,
    }


def run_migrations_offline() -> None:
    """Write the SQL to stdout instead of running it."""
    url = database_url()
    dialect_name = url.split(":", 1)[0].split("+", 1)[0]
    context.configure(
        url=url,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        **_configure_options(dialect_name),
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_on(connection: Connection) -> None:
    context.configure(connection=connection, **_configure_options(connection.dialect.name))
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Migrate through the caller's connection, or one of our own."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_on(connection)
        return
    engine = make_engine(database_url(), foreign_keys=False)
    try:
        with engine.connect() as connection:
            _run_on(connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
