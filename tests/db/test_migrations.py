"""Migrations: upgrade from empty, no autogenerate drift, one head, clean downgrade."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.operations import Operations
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, inspect, text

from optistudio.db.models import Base, JobKind, JobStatus
from optistudio.db.queries import create_job, finish_job, get_job
from optistudio.db.session import make_engine, make_session_factory, transaction

ALEMBIC_INI = Path(__file__).resolve().parents[2] / "alembic.ini"
APP_TABLES = {"models", "environments", "jobs", "measurements", "workers", "shares"}


def alembic_config(url: str | None) -> Config:
    cfg = Config(str(ALEMBIC_INI))
    cfg.attributes["configure_logger"] = False
    if url is not None:
        cfg.attributes["url"] = url
    return cfg


@pytest.fixture
def url(database_url: str) -> str:
    return database_url  # SQLite (in a folder still to create) and PostgreSQL: tests/conftest.py


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'nested' / 'optistudio.db'}"


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    engine = make_engine(url)
    yield engine
    engine.dispose()


def table_names(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def test_upgrade_from_empty_creates_every_table(url: str, engine: Engine) -> None:
    command.upgrade(alembic_config(url), "head")

    assert table_names(engine) == APP_TABLES | {"alembic_version"}
    with engine.connect() as conn:
        version = conn.scalar(text("SELECT version_num FROM alembic_version"))
    assert [version] == ScriptDirectory.from_config(alembic_config(url)).get_heads()


def test_autogenerate_finds_no_difference(url: str, engine: Engine) -> None:
    command.upgrade(alembic_config(url), "head")

    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = compare_metadata(context, Base.metadata)

    assert diff == []


def test_there_is_exactly_one_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config(None)).get_heads()

    assert len(heads) == 1


def test_downgrade_to_base_and_up_again(url: str, engine: Engine) -> None:
    cfg = alembic_config(url)
    command.upgrade(cfg, "head")

    command.downgrade(cfg, "base")
    assert table_names(engine) == {"alembic_version"}

    command.upgrade(cfg, "head")
    assert table_names(engine) >= APP_TABLES


def test_missing_url_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPTISTUDIO_DATABASE_URL", raising=False)

    with pytest.raises(RuntimeError, match="OPTISTUDIO_DATABASE_URL"):
        command.upgrade(alembic_config(None), "head")


@pytest.mark.parametrize(
    ("foreign_keys", "measurements_left"),
    [(False, 1), (True, 0)],
    ids=["fk-off-keeps-children", "fk-on-cascades-on-table-rebuild"],
)
def test_batch_rebuild_of_a_parent_table_needs_foreign_keys_off(
    sqlite_url: str, foreign_keys: bool, measurements_left: int
) -> None:
    url = sqlite_url  # batch mode is SQLite's
    command.upgrade(alembic_config(url), "head")
    engine = make_engine(url, foreign_keys=foreign_keys)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO jobs (kind, status, spec) VALUES ('benchmark', 'queued', '{}')")
        )
        conn.execute(
            text(
                "INSERT INTO measurements (job_id, backend, batch_size, threads, metric, value, unit)"
                " VALUES (1, 'onnxruntime', 1, 1, 'latency_p50', 1.0, 'ms')"
            )
        )

    with engine.begin() as conn:
        ops = Operations(MigrationContext.configure(conn))
        with ops.batch_alter_table("jobs", recreate="always"):
            pass

    with engine.connect() as conn:
        assert conn.scalar(text("SELECT count(*) FROM measurements")) == measurements_left
    engine.dispose()


def test_upgrade_keeps_rows_written_under_the_first_revision(url: str, engine: Engine) -> None:
    command.upgrade(alembic_config(url), "0001")
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO jobs (kind, status, spec) VALUES ('benchmark', 'queued', '{}')")
        )

    command.upgrade(alembic_config(url), "head")

    with engine.connect() as conn:
        rows = conn.execute(text("SELECT kind, status, result FROM jobs")).all()
    assert rows == [("benchmark", "queued", None)]


def test_rows_from_before_error_fields_load_and_a_downgrade_keeps_hints(
    url: str, engine: Engine
) -> None:
    cfg = alembic_config(url)
    command.upgrade(cfg, "0005")
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO jobs (kind, status, spec, message) VALUES "
                "('benchmark', 'failed', '{}', 'Not an ONNX model. Upload an .onnx file.')"
            )
        )

    command.upgrade(cfg, "head")
    factory = make_session_factory(url)
    with transaction(factory) as s:
        old = get_job(s, job_id=1)
        assert (old.status, old.message, old.error_code, old.error_hint) == (
            JobStatus.failed,
            "Not an ONNX model. Upload an .onnx file.",
            None,
            None,
        )
        new = create_job(s, kind=JobKind.benchmark, spec={}, model_id=None)
        s.flush()
        finish_job(
            s,
            job_id=new.id,
            status=JobStatus.timed_out,
            message="Timed out.",
            error_code="timeout",
            error_hint="Make the run shorter.",
        )
    factory.kw["bind"].dispose()
    command.downgrade(cfg, "0005")

    with engine.connect() as conn:
        rows = conn.execute(text("SELECT status, message FROM jobs ORDER BY id")).all()
    assert rows == [
        ("failed", "Not an ONNX model. Upload an .onnx file."),
        ("failed", "Timed out. Make the run shorter."),
    ]
