"""A throw-away PostgreSQL server for the database and integration tests.

It is found on PATH or in Debian's /usr/lib/postgresql/<version>/bin. initdb refuses to run as
root, so as root the cluster is created and run as the `postgres` user (Debian's package
creates it). The server listens on 127.0.0.1 on a free port with trust authentication and
durability off (a test cluster, thrown away afterwards).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

MISSING = (
    "PostgreSQL is not installed (no initdb/pg_ctl on PATH or in /usr/lib/postgresql/*/bin); "
    "`apt-get install postgresql` to run the PostgreSQL variants"
)


def find_bin_dir() -> Path | None:
    """The folder holding initdb and pg_ctl, or None."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return Path(os.path.realpath(on_path)).parent
    for candidate in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (candidate / "initdb").exists() and (candidate / "pg_ctl").exists():
            return candidate
    return None


def skip_or_fail(reason: str) -> None:
    """Skip locally; in CI (env CI set) a missing PostgreSQL is a failure, not a skip."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so the PostgreSQL tests must run)", pytrace=False)
    pytest.skip(reason)


@dataclass
class PostgresServer:
    bin_dir: Path
    data_dir: Path
    port: int
    run_as: str | None
    _counter: int = 0

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def url_of(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _command(self, *args: str) -> list[str]:
        if self.run_as:
            return ["runuser", "-u", self.run_as, "--", *args]
        return list(args)

    def pg_ctl(self, *args: str, timeout: float = 60) -> None:
        command = self._command(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args)
        # cwd: the postgres user may not be allowed into the checkout (e.g. under /root).
        cwd = self.data_dir.parent
        _run(command, cwd=cwd, timeout=timeout)

    def start(self) -> None:
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data_dir}"
        options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        options += " -c max_connections=200"
        self.pg_ctl("-w", "-l", str(self.data_dir / "server.log"), "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self.pg_ctl("-w", "-m", mode, "stop")

    def create_database(self) -> str:
        """A fresh, empty database; returns its SQLAlchemy URL."""
        import psycopg

        self._counter += 1
        name = f"test_{os.getpid()}_{self._counter}"
        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_of(name)

    def drop_database(self, url: str) -> None:
        import psycopg

        name = url.rsplit("/", 1)[1]
        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def start_server(port: int) -> PostgresServer:
    """initdb + start; skips (or fails in CI) when PostgreSQL or psycopg is missing."""
    bin_dir = find_bin_dir()
    if bin_dir is None:
        skip_or_fail(MISSING)
        raise AssertionError("unreachable")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        skip_or_fail("psycopg is not installed; `pip install -e '.[postgres]'`")
    run_as = None
    if os.geteuid() == 0:
        run_as = "postgres"
        try:
            import pwd

            pwd.getpwnam(run_as)
        except KeyError:
            skip_or_fail("running as root and there is no `postgres` user to run initdb as")
    root = Path(tempfile.mkdtemp(prefix="optistudio-pg-"))
    data_dir = root / "cluster"
    data_dir.mkdir()
    if run_as:
        shutil.chown(root, user=run_as)
        shutil.chown(data_dir, user=run_as)
        root.chmod(0o755)
    server = PostgresServer(bin_dir=bin_dir, data_dir=data_dir, port=port, run_as=run_as)
    initdb = server._command(
        str(bin_dir / "initdb"), "-D", str(data_dir), "-U", "postgres", "--auth=trust", "-E", "UTF8"
    )
    _run(initdb, cwd=root, timeout=120)
    server.start()
    _wait_until_accepting(server)
    return server


def _run(command: list[str], *, cwd: Path, timeout: float) -> None:
    """Run a PostgreSQL tool; a failure says what it printed."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )


def _wait_until_accepting(server: PostgresServer, timeout: float = 30) -> None:
    import psycopg

    deadline = time.monotonic() + timeout
    dsn = f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres connect_timeout=2"
    while True:
        try:
            psycopg.connect(dsn).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def remove_server(server: PostgresServer) -> None:
    try:
        server.stop("immediate")
    finally:
        shutil.rmtree(server.data_dir.parent, ignore_errors=True)


@contextmanager
def empty_database(request: pytest.FixtureRequest, folder: Path) -> Iterator[str]:
    """The URL of an empty database of the kind a fixture's `request.param` names: SQLite in
    `folder`'s data/, or a fresh database on the session's server (fixture `postgres_server`),
    dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{folder / 'data' / 'optistudio.db'}"
        return
    server = request.getfixturevalue("postgres_server")
    url = server.create_database()
    yield url
    server.drop_database(url)
