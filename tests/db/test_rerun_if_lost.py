"""rerun_if_lost on a real PostgreSQL server whose backend is terminated mid-transaction, as a
server shutting down does ("terminating connection due to administrator command")."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError, ProgrammingError
from sqlalchemy.orm import Session, sessionmaker

from optistudio.db.session import make_session_factory, rerun_if_lost, transaction


@pytest.fixture
def pg(postgres_server) -> Iterator[tuple[str, sessionmaker[Session]]]:  # type: ignore[no-untyped-def]
    url = postgres_server.create_database()
    factory = make_session_factory(url)
    with transaction(factory) as s:
        s.execute(text("CREATE TABLE beats (n integer)"))
    yield url, factory
    factory.kw["bind"].dispose()
    postgres_server.drop_database(url)


def terminate(url: str, s: Session) -> None:
    """End `s`'s server process from another connection, as a shutdown would."""
    pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
    admin = create_engine(url)
    with admin.connect() as other:
        other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    admin.dispose()


def test_a_body_whose_connection_dies_mid_transaction_runs_again_and_writes_once(pg) -> None:  # type: ignore[no-untyped-def]
    url, factory = pg
    runs = []

    def body(s: Session) -> int:
        runs.append(1)
        s.execute(text("INSERT INTO beats VALUES (1)"))
        if len(runs) == 1:
            terminate(url, s)
        return int(s.execute(text("SELECT count(*) FROM beats")).scalar_one())

    counted = rerun_if_lost(factory, body)

    with transaction(factory) as s:
        stored = s.execute(text("SELECT count(*) FROM beats")).scalar_one()
    assert len(runs) == 2 and counted == stored == 1


def test_the_same_loss_inside_a_plain_transaction_is_the_callers(pg) -> None:  # type: ignore[no-untyped-def]
    url, factory = pg

    with pytest.raises(DBAPIError) as lost, transaction(factory) as s:
        s.execute(text("INSERT INTO beats VALUES (1)"))
        terminate(url, s)
        s.execute(text("SELECT 1"))

    assert lost.value.connection_invalidated


def test_a_wrong_statement_is_not_run_again(pg) -> None:  # type: ignore[no-untyped-def]
    _, factory = pg
    runs = []

    def body(s: Session) -> None:
        runs.append(1)
        s.execute(text("SELECT * FROM no_such_table"))

    with pytest.raises(ProgrammingError):
        rerun_if_lost(factory, body)
    assert len(runs) == 1
