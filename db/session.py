"""Engines, session factories and the one transaction helper every caller uses.

SQLite notes: several worker processes write to one file, so every transaction starts with
``BEGIN IMMEDIATE`` (it takes the write lock up front and waits ``busy_timeout`` for it). With
Python's default deferred ``BEGIN`` two read-modify-write transactions both read, then one
loses its update or fails with "database is locked" when upgrading its lock. This follows the
SQLAlchemy recipe "Using SQLAlchemy to emit BEGIN in lieu of SQLite's transaction control":
pysqlite's own transaction handling is switched off (``isolation_level = None``, which works on
every Python version; ``autocommit=False`` needs 3.12) and a ``begin`` listener emits the BEGIN.
The price: every transaction takes the write lock, so a writer that stalls while holding it
(a worker stopped mid-transaction) would hold up every reader too. Pages that only read ask for
``transaction(..., read_only=True)``: a plain deferred ``BEGIN``, which under WAL reads a
snapshot and never waits on a writer. A caller that must not wait long for the lock (a page's
best-effort write) passes ``lock_wait_s``; each BEGIN sets its own ``busy_timeout``.

Availability: ``transaction`` opens its connection (and, on SQLite, unless read-only, takes the
write lock) before the caller's code runs, and retries that step with a growing pause for up to
``retry_s`` seconds, so a database that restarts or is briefly locked delays the caller instead of failing
it. Only that step is retried: nothing of the caller's has run yet. Past the deadline it raises
``DatabaseUnavailable``; a connection lost in the middle of a transaction raises SQLAlchemy's
own error, which ``is_unavailable`` also recognises. ``rerun_if_lost`` runs a body that only
touches the database again after such a loss (a worker's reads, progress and results).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

log = logging.getLogger(__name__)

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 30_000
READ_ONLY_OPTION = "optistudio_read_only"
LOCK_WAIT_MS_OPTION = "optistudio_lock_wait_ms"
"""Connection execution options ``transaction`` sets for SQLite's BEGIN (module notes)."""
DB_RETRY_S = 15.0
"""How long ``transaction`` keeps trying to reach the database before giving up."""
_FIRST_PAUSE_S, _MAX_PAUSE_S = 0.1, 2.0


class DatabaseUnavailable(RuntimeError):
    """The database could not be reached (or locked) within the retry window."""

    def __init__(self, seconds: float, cause: BaseException) -> None:
        first_line = str(cause).strip().splitlines()[0] if str(cause).strip() else type(cause)
        super().__init__(f"The database could not be reached for {seconds:.0f} s ({first_line}).")
        self.seconds = seconds


def is_unavailable(exc: BaseException) -> bool:
    """True for errors that mean the database went away, not that a statement was wrong."""
    if isinstance(exc, DatabaseUnavailable):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def make_engine(url: str | URL, *, foreign_keys: bool = True) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and ``BEGIN IMMEDIATE``.

    ``foreign_keys=False`` is for migrations only: SQLite's batch mode recreates tables, and
    dropping a referenced table with enforcement on would cascade-delete its children.
    """
    sa_url = make_url(url)
    if sa_url.get_backend_name() != "sqlite":
        return create_engine(sa_url, pool_pre_ping=True)
    _create_parent_folder(sa_url)
    engine = create_engine(sa_url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
    _install_sqlite_hooks(engine, foreign_keys=foreign_keys)
    return engine


def _create_parent_folder(url: URL) -> None:
    database = url.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _install_sqlite_hooks(engine: Engine, *, foreign_keys: bool) -> None:
    pragmas = (
        "PRAGMA journal_mode=WAL",
        f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}",
        f"PRAGMA foreign_keys={'ON' if foreign_keys else 'OFF'}",
        "PRAGMA synchronous=NORMAL",
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves, below
        for pragma in pragmas:
            dbapi_connection.execute(pragma).close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        options = connection.get_execution_options()
        wait_ms = options.get(LOCK_WAIT_MS_OPTION, SQLITE_BUSY_TIMEOUT_MS)
        connection.exec_driver_sql(f"PRAGMA busy_timeout={int(wait_ms)}")
        connection.exec_driver_sql("BEGIN" if options.get(READ_ONLY_OPTION) else "BEGIN IMMEDIATE")


def make_session_factory(url_or_engine: str | URL | Engine) -> sessionmaker[Session]:
    """A session factory whose objects stay readable after commit (``expire_on_commit=False``)."""
    engine = url_or_engine if isinstance(url_or_engine, Engine) else make_engine(url_or_engine)
    return sessionmaker(bind=engine, expire_on_commit=False)


@contextmanager
def transaction(
    factory: sessionmaker[Session],
    *,
    retry_s: float | None = None,
    read_only: bool = False,
    lock_wait_s: float | None = None,
) -> Iterator[Session]:
    """One session, one transaction: commit on success, roll back on error, always close.

    Connecting is retried for ``retry_s`` seconds (default ``DB_RETRY_S``); see the module notes.
    On SQLite, ``read_only`` (for bodies that only read) never waits on a writer, and
    ``lock_wait_s`` bounds each wait for the write lock (default ``SQLITE_BUSY_TIMEOUT_MS``).
    """
    options: dict[str, Any] = {READ_ONLY_OPTION: read_only}
    if lock_wait_s is not None:
        options[LOCK_WAIT_MS_OPTION] = lock_wait_s * 1000
    retry = DB_RETRY_S if retry_s is None else retry_s
    session, begun = _begin_with_retry(factory, retry, options)
    with session, begun:
        yield session


def rerun_if_lost(
    factory: sessionmaker[Session], body: Callable[[Session], T], *, retry_s: float | None = None
) -> T:
    """``body(session)`` in one ``transaction``; when the connection is lost in the middle (the
    server restarted under it), the transaction was rolled back, so the body runs again in a new
    one, within the same retry window. Only for bodies that touch nothing but the database and
    write what they write idempotently: a commit whose answer was lost may have landed."""
    window = DB_RETRY_S if retry_s is None else retry_s
    started = time.monotonic()
    while True:
        left = window - (time.monotonic() - started)
        try:
            with transaction(factory, retry_s=max(left, 0.0)) as s:
                return body(s)
        except DBAPIError as exc:
            if not exc.connection_invalidated or left <= 0:
                raise
            log.warning("database connection lost mid-transaction (%s); running it again", exc.orig)


def _begin_with_retry(
    factory: sessionmaker[Session], retry_s: float, options: dict[str, Any]
) -> tuple[Session, SessionTransaction]:
    started = time.monotonic()
    pause = _FIRST_PAUSE_S
    while True:
        session = factory()
        try:
            begun = session.begin()
            session.connection(execution_options=options)
            return session, begun
        except (OperationalError, InterfaceError) as exc:
            session.close()
            waited = time.monotonic() - started
            if waited + pause > retry_s:
                raise DatabaseUnavailable(waited, exc) from exc
            log.warning("database unreachable (%s); retrying in %.1f s", exc.orig, pause)
            time.sleep(pause)
            pause = min(pause * 2, _MAX_PAUSE_S)
