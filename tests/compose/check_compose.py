#!/usr/bin/env python3
"""Run docker-compose.yml for real and check what the deployment promises.

    python3 tests/compose/check_compose.py [--keep] [--only up,scale,job,kill,redis,volumes,gpu]

Needs a Docker engine, Docker Compose (v1 `docker-compose` or the v2 plugin), and, to build the
stand-in images, root and debootstrap. Standard library only; the login check drives headless
Chromium through playwright when both are installed (run it with the project's .venv python, as
`make compose-check` does), and says "skip" otherwise.

Images. Where an image the compose file names (python:3.11-slim, redis:7, postgres:16,
mher/flower:2.0) is already present without our stand-in label, the real image is used. Otherwise
a stand-in is built from tests/compose/standins/ on a Debian bookworm root file system made once
with debootstrap and cached in /var/cache/optistudio-compose (OPTISTUDIO_COMPOSE_CACHE). The
stand-ins are Debian's packages (Redis 7.0, PostgreSQL 15, Python 3.11) and Flower 2.0 from PyPI:
see each Dockerfile. docker-compose.yml and the Dockerfile run as they are.

The stack runs as compose project `optistudio-check` with fresh random secrets, on free host
ports; it is removed with its volumes at the end (`--keep` leaves it running). Each check prints
PASS, FAIL or SKIP with what was seen and how long it took; the exit status is 1 if any failed.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
STANDINS = HERE / "standins"
IN_STACK = HERE / "in_stack.py"
CACHE = Path(os.environ.get("OPTISTUDIO_COMPOSE_CACHE", "/var/cache/optistudio-compose"))
MINBASE_TAR = CACHE / "bookworm-minbase.tar"
MINBASE_IMAGE = "optistudio-standin/debian:bookworm-minbase"
BASE_IMAGE = "optistudio-standin/debian:bookworm"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
DEBIAN_MIRROR = "http://deb.debian.org/debian"
STANDIN_LABEL = "org.optistudio.standin"
STANDINS_BY_TAG = {  # build order: flower's stand-in builds on the python one
    "python:3.11-slim": "python",
    "redis:7": "redis",
    "postgres:16": "postgres",
    "mher/flower:2.0": "flower",
}
PROJECT = "optistudio-check"
APP_IMAGE = "optistudio:latest"
LONG_RUNNING = ["redis", "postgres", "worker", "studio", "flower"]
ALL_CHECKS = ["up", "scale", "job", "kill", "redis", "volumes", "gpu"]
STAMP = HERE / "passed.json"
DEPLOYMENT_FILES = [
    "docker-compose.yml", "Dockerfile", ".dockerignore", "pyproject.toml", "setup.py",
    "alembic.ini", "migrations", "optistudio/cli/__init__.py", "optistudio/cli/__main__.py",
    "optistudio/cli/launcher.py", "optistudio/cli/worker.py", "optistudio/services",
    "workers/app.py", "studio/app.py", "studio/auth.py", "tests/compose",
]  # fmt: skip
"""What the stack's wiring rests on: the compose file, the image, its dependencies, the
migrations the migrate service runs, the commands (`optistudio migrate`, `worker`, `ui`) and
settings the services start with, the worker's health check and the studio's login. `--needed` compares their digest with the one the
last passing run wrote to STAMP (the rest of the code is what every other suite tests, and
tests/test_compose.py checks that whatever the services load at start is installed in the
image)."""
KILLED_JOB_S = 30.0
"""The job killed mid-way measures this long, so the kill lands well inside it. 12 s was too
short on a loaded machine: the poll saw 'running' late, and the job's last write beat the kill
(succeeded on its first attempt 4 s after it, 2026-12-05)."""


class CheckFailed(Exception):
    pass


def log(text: str) -> None:
    print(text, flush=True)


def run(
    command: list[str],
    *,
    env: dict[str, str] | None = None,
    stdin: Any = None,
    timeout: float = 600,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        command, env=env, stdin=stdin, capture_output=True, text=True, timeout=timeout
    )
    if check and result.returncode != 0:
        raise CheckFailed(
            f"`{' '.join(command)}` exited {result.returncode}:\n"
            f"{(result.stdout + result.stderr)[-3000:]}"
        )
    return result


def wait_until(check: Callable[[], Any], what: str, timeout: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CheckFailed(f"{what}: not within {timeout:.0f} s")
        time.sleep(every)


def parse_time(stamp: str) -> datetime:
    """Docker's RFC 3339 times carry nanoseconds; Python parses microseconds."""
    head, _, rest = stamp.rstrip("Z").partition(".")
    micros = (rest[:6]).ljust(6, "0") if rest else "000000"
    return datetime.fromisoformat(f"{head}.{micros}+00:00").astimezone(UTC)


def free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise CheckFailed("no free TCP port")


# -- images ----------------------------------------------------------------------------------


def image_label(tag: str) -> str | None:
    """None: no such image; "": an image without our stand-in label (a real one)."""
    result = run(
        [
            "docker",
            "image",
            "inspect",
            "-f",
            f'{{{{index .Config.Labels "{STANDIN_LABEL}"}}}}',
            tag,
        ],
        check=False,
    )
    if result.returncode != 0:
        return None
    label = result.stdout.strip()
    return "" if label in {"", "<no value>"} else label


def build_base() -> str:
    """The debootstrapped bookworm image, from the cached tarball when there is one."""
    if image_label(BASE_IMAGE) is not None and image_label(MINBASE_IMAGE) is not None:
        return "cached"
    made = "cached tarball"
    if not MINBASE_TAR.exists():
        if shutil.which("debootstrap") is None or os.geteuid() != 0:
            raise CheckFailed(
                "Building the stand-in images needs root and debootstrap "
                "(apt-get install debootstrap), or pull the real images first."
            )
        CACHE.mkdir(parents=True, exist_ok=True)
        rootfs = CACHE / "rootfs.tmp"
        shutil.rmtree(rootfs, ignore_errors=True)
        run(
            ["debootstrap", "--variant=minbase", "bookworm", str(rootfs), DEBIAN_MIRROR],
            timeout=1800,
        )
        for leftover in [
            *(rootfs / "var/cache/apt/archives").glob("*.deb"),
            rootfs / "var/lib/apt/lists",
        ]:
            if leftover.is_dir():
                shutil.rmtree(leftover)
            else:
                leftover.unlink()
        partial = MINBASE_TAR.with_suffix(".partial")
        run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], timeout=600)
        partial.rename(MINBASE_TAR)
        shutil.rmtree(rootfs)
        made = "debootstrap"
    run(["docker", "import", "--change", 'CMD ["bash"]', str(MINBASE_TAR), MINBASE_IMAGE])
    with tempfile.TemporaryDirectory() as context:
        shutil.copy(STANDINS / "base" / "Dockerfile", context)
        shutil.copy(HOST_CA_BUNDLE, Path(context) / "host-ca-bundle.crt")
        run(
            ["docker", "build", "-q", "--label", f"{STANDIN_LABEL}=base", "-t", BASE_IMAGE, context]
        )
    return made


def build_standins() -> dict[str, str]:
    """tag -> "real image" or "stand-in"; stand-ins are rebuilt (cached layers) every run."""
    used = {}
    base_built = False
    for tag, folder in STANDINS_BY_TAG.items():
        if image_label(tag) == "":
            used[tag] = "real image"
            continue
        if not base_built:
            log(f"  base image: {build_base()}")
            base_built = True
        run(
            [
                "docker",
                "build",
                "-q",
                "--label",
                f"{STANDIN_LABEL}={folder}",
                "-t",
                tag,
                str(STANDINS / folder),
            ],
            timeout=1800,
        )
        used[tag] = "stand-in"
    return used


# -- the stack -------------------------------------------------------------------------------


@dataclass
class Stack:
    env: dict[str, str]
    compose_command: list[str]
    studio_port: int
    flower_port: int
    studio_password: str
    flower_password: str

    @classmethod
    def create(cls) -> Stack:
        if shutil.which("docker-compose"):
            command = ["docker-compose"]
        elif run(["docker", "compose", "version"], check=False).returncode == 0:
            command = ["docker", "compose"]
        else:
            raise CheckFailed("Docker Compose is missing: apt-get install docker-compose")
        studio_password, flower_password = secrets.token_hex(12), secrets.token_hex(12)
        studio_port, flower_port = free_port(8501), free_port(5555)
        env = dict(
            os.environ,
            POSTGRES_PASSWORD=secrets.token_hex(16),
            OPTISTUDIO_STUDIO_PASSWORD=studio_password,
            FLOWER_PASSWORD=flower_password,
            STUDIO_HOST_PORT=str(studio_port),
            FLOWER_HOST_PORT=str(flower_port),
        )
        return cls(env, command, studio_port, flower_port, studio_password, flower_password)

    def compose(
        self, *args: str, timeout: float = 600, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        command = [*self.compose_command, "-p", PROJECT, "-f", str(REPO / "docker-compose.yml")]
        return run([*command, *args], env=self.env, timeout=timeout, check=check)

    def containers(self, service: str) -> list[str]:
        """Ids of the service's containers, running or not."""
        out = run(
            [
                "docker",
                "ps",
                "-a",
                "-q",
                "--no-trunc",
                "--filter",
                f"label=com.docker.compose.project={PROJECT}",
                "--filter",
                f"label=com.docker.compose.service={service}",
            ]
        ).stdout
        return out.split()

    def container(self, service: str) -> str:
        ids = self.containers(service)
        if len(ids) != 1:
            raise CheckFailed(f"expected one {service} container, found {len(ids)}")
        return ids[0]

    @staticmethod
    def inspect(container: str) -> dict[str, Any]:
        return dict(json.loads(run(["docker", "inspect", container]).stdout)[0])

    def health(self, service: str) -> list[str]:
        states = []
        for cid in self.containers(service):
            state = self.inspect(cid)["State"]
            states.append(state.get("Health", {}).get("Status") or state["Status"])
        return states

    def wait_healthy(self, workers: int = 1, timeout: float = 300) -> float:
        start = time.monotonic()

        def ready() -> bool:
            for service in LONG_RUNNING:
                states = self.health(service)
                wanted = workers if service == "worker" else 1
                if len([s for s in states if s == "healthy"]) != wanted:
                    return False
            return True

        try:
            wait_until(ready, "every service healthy", timeout, every=2)
        except CheckFailed as exc:
            states = {service: self.health(service) for service in [*LONG_RUNNING, "migrate"]}
            raise CheckFailed(f"{exc}; states: {states}") from None
        return time.monotonic() - start

    def in_stack(self, *args: str, timeout: float = 120) -> dict[str, Any]:
        """tests/compose/in_stack.py inside the studio container; its JSON answer."""
        with IN_STACK.open() as script:
            result = run(
                ["docker", "exec", "-i", self.container("studio"), "python", "-", *args],
                stdin=script,
                timeout=timeout,
                check=False,
            )
        if result.returncode != 0:
            raise CheckFailed(f"in_stack {' '.join(args)} failed:\n{result.stderr[-2000:]}")
        return dict(json.loads(result.stdout.strip().splitlines()[-1]))

    def psql(self, sql: str) -> list[list[str]]:
        out = run(
            [
                "docker",
                "exec",
                self.container("postgres"),
                "psql",
                "-U",
                "optistudio",
                "-d",
                "optistudio",
                "-AtF",
                "\t",
                "-c",
                sql,
            ]
        ).stdout
        return [line.split("\t") for line in out.splitlines() if line]

    def jobs(self, job_ids: list[int]) -> dict[str, Any]:
        return dict(self.in_stack("jobs", *map(str, job_ids))["jobs"])

    def wait_jobs(self, job_ids: list[int], timeout: float) -> dict[str, Any]:
        def terminal() -> dict[str, Any] | None:
            rows = self.jobs(job_ids)
            done = all(
                r and r["status"] in {"succeeded", "failed", "cancelled"} for r in rows.values()
            )
            return rows if done else None

        return dict(wait_until(terminal, f"jobs {job_ids} finished", timeout, every=2))

    def worker_container(self, worker_name: str) -> str:
        """The container whose host name is the worker's (`cpu@<hostname>`)."""
        hostname = worker_name.split("@", 1)[1]
        for cid in self.containers("worker"):
            if self.inspect(cid)["Config"]["Hostname"] == hostname:
                return cid
        raise CheckFailed(f"no worker container has the host name {hostname}")

    def http(self, port: int, path: str, auth: tuple[str, str] | None = None) -> tuple[int, str]:
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
        if auth:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=15) as response:
                return response.status, response.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, ""

    def flower_workers(self) -> list[str]:
        status, body = self.http(
            self.flower_port, "/api/workers?refresh=1", auth=("admin", self.flower_password)
        )
        return sorted(json.loads(body)) if status == 200 else []

    def measurement_count(self, job_id: int) -> int:
        return int(
            self.psql(f"select count(*) from measurements where job_id = {int(job_id)}")[0][0]
        )

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "40", check=False).stdout[-8000:]


# -- the checks ------------------------------------------------------------------------------


@dataclass
class Outcome:
    name: str
    verdict: str  # PASS, FAIL, SKIP
    detail: str
    seconds: float


@dataclass
class Check:
    stack: Stack
    outcomes: list[Outcome] = field(default_factory=list)
    model_id: int = 0

    def record(self, name: str, verdict: str, detail: str, start: float) -> None:
        outcome = Outcome(name, verdict, detail, time.monotonic() - start)
        self.outcomes.append(outcome)
        log(f"{verdict:4}  {name} ({outcome.seconds:.1f} s): {detail}")

    def step(self, name: str, body: Callable[[], tuple[bool, str]]) -> bool:
        start = time.monotonic()
        try:
            ok, detail = body()
        except SkipCheck as exc:
            self.record(name, "SKIP", str(exc), start)
            return True
        except Exception as exc:  # a check that raises has failed; say how
            detail = str(exc) if isinstance(exc, CheckFailed) else traceback.format_exc(limit=3)
            ok = False
        self.record(name, "PASS" if ok else "FAIL", detail, start)
        return ok

    # 1. the stack comes up in order -------------------------------------------------------

    def migration_ran_once_first(self) -> tuple[bool, str]:
        migrate = [self.stack.inspect(cid) for cid in self.stack.containers("migrate")]
        if len(migrate) != 1:
            return False, f"{len(migrate)} migrate containers"
        state = migrate[0]["State"]
        finished = parse_time(state["FinishedAt"])
        starts = {
            service: parse_time(
                self.stack.inspect(self.stack.container(service))["State"]["StartedAt"]
            )
            for service in ["worker", "studio"]
        }
        ran = self.stack.compose("logs", "--no-color", "migrate").stdout.count(
            "database is at the newest schema"
        )
        (head,) = self.stack.psql("select version_num from alembic_version")
        after = all(start > finished for start in starts.values())
        ok = state["Status"] == "exited" and state["ExitCode"] == 0 and ran == 1 and after
        lead = ", ".join(
            f"{s} started {(t - finished).total_seconds():.1f} s after" for s, t in starts.items()
        )
        return ok, (
            f"migrate exited {state['ExitCode']}, ran {ran}x, schema {head[0]}; "
            f"it finished at {finished:%H:%M:%S.%f}, {lead}"
        )

    def studio_answers(self) -> tuple[bool, str]:
        health = self.stack.http(self.stack.studio_port, "/_stcore/health")
        root = self.stack.http(self.stack.studio_port, "/")
        ok = health == (200, "ok") and root[0] == 200
        return ok, f"/_stcore/health {health[0]} {health[1]!r}, / {root[0]} ({len(root[1])} bytes)"

    def login_page(self) -> tuple[bool, str]:
        chromium = shutil.which("chromium") or "/usr/bin/chromium"
        try:
            from playwright.sync_api import expect, sync_playwright
        except ImportError:
            raise SkipCheck(
                "playwright is not installed: run with the project's .venv python"
            ) from None
        if not Path(chromium).exists():
            raise SkipCheck("Chromium is not installed (apt-get install chromium)")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            try:
                page = browser.new_page()
                page.set_default_timeout(60_000)
                # expect() has its own 5-s default, which a studio still "Running..." its first
                # script under the image build's load outlasts (CI, 2026-12-01): wait as long
                # as the page's own default.
                expect.set_options(timeout=60_000)
                page.goto(f"http://127.0.0.1:{self.stack.studio_port}/")
                password = page.get_by_label("Password", exact=True)
                expect(password).to_be_visible()
                gated = page.get_by_role("heading", name="Models").count() == 0
                password.fill(self.stack.studio_password)
                page.get_by_role("button", name="Sign in").click()
                expect(page.get_by_role("heading", name="Models")).to_be_visible()
            finally:
                browser.close()
        return (
            gated,
            "password form shown and pages closed before sign-in; signed in, Models page shown",
        )

    def flower_answers(self) -> tuple[bool, str]:
        anonymous = self.stack.http(self.stack.flower_port, "/")[0]
        signed = self.stack.http(
            self.stack.flower_port, "/", auth=("admin", self.stack.flower_password)
        )[0]
        workers = wait_until(self.stack.flower_workers, "Flower listing a worker", 60, every=3)
        ok = anonymous == 401 and signed == 200 and len(workers) == 1
        return ok, f"without password {anonymous}, with it {signed}; workers {workers}"

    # 2. two workers -----------------------------------------------------------------------

    def two_workers(self) -> tuple[bool, str]:
        migrate_before = self.stack.inspect(self.stack.container("migrate"))["State"]["StartedAt"]
        self.stack.compose("up", "-d", "--scale", "worker=2")
        waited = self.stack.wait_healthy(workers=2)
        hostnames = sorted(
            "cpu@" + self.stack.inspect(cid)["Config"]["Hostname"]
            for cid in self.stack.containers("worker")
        )

        def both() -> dict[str, Any] | None:
            seen = self.stack.in_stack("workers")
            return seen if seen["live"] == hostnames and seen["pinged"] == hostnames else None

        seen = wait_until(both, "both workers live and answering ping", 90, every=3)
        flower = wait_until(
            lambda: self.stack.flower_workers() == hostnames and hostnames,
            "Flower listing both",
            60,
            3,
        )
        migrate_after = self.stack.inspect(self.stack.container("migrate"))["State"]["StartedAt"]
        rerun = (
            "" if migrate_after == migrate_before else "; `up --scale` ran migrate again (exit 0)"
        )
        return True, (
            f"healthy after {waited:.0f} s; ping {seen['pinged']}; heartbeats {seen['live']}; "
            f"Flower {flower}{rerun}"
        )

    # 3. a real job ------------------------------------------------------------------------

    def job_end_to_end(self) -> tuple[bool, str]:
        model = self.stack.in_stack("model")
        self.model_id = int(model["model_id"])
        (job_id,) = self.stack.in_stack("submit", str(self.model_id), "0.5", "1")["jobs"]
        rows = self.stack.wait_jobs([job_id], timeout=180)
        job = rows[str(job_id)]
        metrics = self.stack.psql(
            "select m.metric, m.value from measurements m join jobs j on j.id = m.job_id "
            f"where j.id = {int(job_id)} and j.status = 'succeeded' order by m.metric"
        )
        values = dict(metrics)
        ok = job["status"] == "succeeded" and "p50_ms" in values and "throughput" in values
        return ok, (
            f"model #{self.model_id} stored at {model['stored']}; job #{job_id} {job['status']} on "
            f"{job['worker']}; {len(metrics)} measurement rows in PostgreSQL "
            f"(p50 {float(values.get('p50_ms', 'nan')):.4f} ms, "
            f"{float(values.get('throughput', 'nan')):.0f} inf/s)"
        )

    # 4. faults ----------------------------------------------------------------------------

    def kill_worker_mid_job(self) -> tuple[bool, str]:
        (job_id,) = self.stack.in_stack("submit", str(self.model_id), str(KILLED_JOB_S), "1")[
            "jobs"
        ]

        def running() -> dict[str, Any] | None:
            row = self.stack.jobs([job_id])[str(job_id)]
            return row if row["status"] == "running" else None

        first = wait_until(running, f"job #{job_id} running", 120)
        victim = self.stack.worker_container(first["worker"])
        time.sleep(3.0)  # well inside the measurement
        run(["docker", "kill", "-s", "KILL", victim])
        killed = time.monotonic()
        requeued_after = None
        deadline = killed + 300
        while time.monotonic() < deadline:
            row = self.stack.jobs([job_id])[str(job_id)]
            if requeued_after is None and (
                row["attempts"] > 1 or row["message"].startswith("Requeued")
            ):
                requeued_after = time.monotonic() - killed
            if row["status"] in {"succeeded", "failed", "cancelled"}:
                break
            time.sleep(1)
        else:
            raise CheckFailed(f"job #{job_id} not finished 300 s after the kill: {row}")
        ended_after = time.monotonic() - killed
        victim_state = self.stack.inspect(victim)["State"]
        restarted = (
            "restarted by Docker" if victim_state["Running"] else f"left {victim_state['Status']}"
        )
        rows = self.stack.psql(
            f"select count(*), count(distinct metric) from measurements where job_id = {int(job_id)}"
        )[0]
        reran = row["status"] == "succeeded" and row["attempts"] >= 2 and rows[0] == rows[1] != "0"
        failed_clearly = row["status"] == "failed" and bool(row["message"])
        detail = (
            f"job #{job_id} ({KILLED_JOB_S:.0f} s) ran on {first['worker']}, its container was "
            f"SIGKILLed 3 s in ({restarted}); requeued "
            + (f"{requeued_after:.0f} s" if requeued_after is not None else "never")
            + f" after the kill; {row['status']} {ended_after:.0f} s after it on {row['worker']}, "
            f"attempt {row['attempts']}, {rows[0]} rows ({rows[1]} metrics); message: {row['message']!r}"
        )
        # Put the pool back to two healthy workers for the next check.
        self.stack.compose("up", "-d", "--scale", "worker=2")
        self.stack.wait_healthy(workers=2)
        return reran or failed_clearly, detail

    def redis_restart_with_queued_jobs(self) -> tuple[bool, str]:
        submitted = self.stack.in_stack("submit", str(self.model_id), "3", "6")["jobs"]
        redis = self.stack.container("redis")
        queued = int(run(["docker", "exec", redis, "redis-cli", "llen", "cpu"]).stdout.strip() or 0)
        start = time.monotonic()
        self.stack.compose("restart", "redis")
        restart_s = time.monotonic() - start
        rows = self.stack.wait_jobs(submitted, timeout=400)
        statuses = [rows[str(j)]["status"] for j in submitted]
        with_rows = sum(self.stack.measurement_count(j) > 0 for j in submitted)
        attempts = sorted(rows[str(j)]["attempts"] for j in submitted)
        ok = statuses.count("succeeded") == len(submitted) == with_rows and queued > 0
        return ok, (
            f"{len(submitted)} jobs of 3 s on 2 workers, {queued} waiting in Redis's `cpu` list "
            f"when `restart redis` ran ({restart_s:.1f} s); succeeded {statuses.count('succeeded')}, "
            f"failed {statuses.count('failed')}, with result rows {with_rows}, attempts {attempts}, "
            f"lost {sum(s not in {'succeeded', 'failed', 'cancelled'} for s in statuses)}"
        )

    def volumes_survive_down_up(self) -> tuple[bool, str]:
        count_sql = (
            "select (select count(*) from models), (select count(*) from jobs), "
            "(select count(*) from measurements)"
        )
        (before,) = self.stack.psql(count_sql)
        self.stack.compose("down", timeout=300)
        left = len(self.stack.containers("worker") + self.stack.containers("postgres"))
        self.stack.compose("up", "-d", timeout=600)
        self.stack.wait_healthy(workers=1)
        (after,) = self.stack.psql(count_sql)
        (job_id,) = self.stack.in_stack("submit", str(self.model_id), "0.2", "1")["jobs"]
        job = self.stack.wait_jobs([job_id], timeout=180)[str(job_id)]
        rows = self.stack.measurement_count(job_id)
        ok = left == 0 and before == after and job["status"] == "succeeded" and rows > 0
        return ok, (
            f"models/jobs/measurements {'/'.join(before)} before `down`, {'/'.join(after)} after "
            f"`up` ({left} containers left between); a new job on model #{self.model_id} (its file "
            f"from the artifacts volume) {job['status']} with {rows} rows"
        )

    def gpu_profile_config(self) -> tuple[bool, str]:
        self.stack.compose("--profile", "gpu", "config", "-q")
        services = self.stack.compose("--profile", "gpu", "config", "--services").stdout.split()
        return "worker-gpu" in services, (
            f"`--profile gpu config` valid, services {sorted(services)}; not started: no GPU here"
        )


class SkipCheck(Exception):
    pass


def deployment_digest() -> str:
    """sha256 over DEPLOYMENT_FILES (folders: every file in them but caches and STAMP)."""
    digest = hashlib.sha256()
    for name in DEPLOYMENT_FILES:
        path = REPO / name
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for file in files:
            if file == STAMP or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            digest.update(str(file.relative_to(REPO)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()


def needed() -> int:
    """0 (run it) when the deployment files changed since the last passing run, else 1."""
    digest = deployment_digest()
    try:
        stamp = json.loads(STAMP.read_text())
    except (OSError, ValueError):
        stamp = {}
    if stamp.get("digest") == digest:
        log(
            f"the deployment files are as they were when the compose check last passed "
            f"({stamp.get('date')}, {stamp.get('summary')}): not run again"
        )
        return 1
    log("the deployment files changed since the compose check last passed: it runs")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack running at the end")
    parser.add_argument(
        "--only", default=",".join(ALL_CHECKS), help=f"comma-separated subset of {ALL_CHECKS}"
    )
    parser.add_argument(
        "--needed",
        action="store_true",
        help="only say whether the deployment files changed since the last passing run "
        "(exit 0: they did, run the check; 1: they did not)",
    )
    args = parser.parse_args(argv)
    if args.needed:
        return needed()
    wanted = set(args.only.split(","))
    if unknown := wanted - set(ALL_CHECKS):
        parser.error(f"unknown checks {sorted(unknown)}; choose from {ALL_CHECKS}")
    if wanted & {"kill", "redis", "volumes"}:
        wanted.add("job")  # they run jobs on the model the job check stores
    if run(["docker", "info"], check=False, timeout=60).returncode != 0:
        log("FAIL  no Docker engine answers `docker info`: start dockerd")
        return 1

    started = time.monotonic()
    timings: dict[str, float] = {}
    stack = Stack.create()
    check = Check(stack)
    stack.compose("down", "-v", "--remove-orphans", check=False)  # a leftover of an earlier run

    try:
        t = time.monotonic()
        used = build_standins()
        timings["images"] = time.monotonic() - t
        log(f"      images ({timings['images']:.0f} s): {used}")

        t = time.monotonic()
        old_app = run(
            ["docker", "image", "inspect", "-f", "{{.Id}}", APP_IMAGE], check=False
        ).stdout.strip()
        stack.compose("up", "--build", "-d", timeout=3600)
        timings["up --build"] = time.monotonic() - t
        new_app = run(["docker", "image", "inspect", "-f", "{{.Id}}", APP_IMAGE]).stdout.strip()
        if old_app and old_app != new_app:  # the image this build replaced, now untagged
            run(["docker", "image", "rm", old_app], check=False)
        t = time.monotonic()
        try:
            stack.wait_healthy(workers=1)
        except CheckFailed as exc:
            check.record("stack up and healthy", "FAIL", f"{exc}\n{stack.logs()}", t)
            return 1
        timings["healthy"] = time.monotonic() - t
        log(
            f"      `up --build -d` {timings['up --build']:.0f} s, every service healthy "
            f"{timings['healthy']:.0f} s later (studio :{stack.studio_port}, Flower :{stack.flower_port})"
        )

        steps: list[tuple[str, str, Callable[[], tuple[bool, str]]]] = [
            ("up", "1. migrate ran once, before worker and studio", check.migration_ran_once_first),
            ("up", "1. studio answers HTTP", check.studio_answers),
            ("up", "1. studio shows its login page (Chromium)", check.login_page),
            ("up", "1. Flower answers behind basic auth", check.flower_answers),
            ("scale", "2. --scale worker=2: both answer", check.two_workers),
            ("job", "3. a benchmark job end to end", check.job_end_to_end),
            ("kill", "4. worker container SIGKILLed mid-job", check.kill_worker_mid_job),
            ("redis", "4. Redis restarted with jobs queued", check.redis_restart_with_queued_jobs),
            ("volumes", "5. down, up: results kept", check.volumes_survive_down_up),
            ("gpu", "GPU profile config", check.gpu_profile_config),
        ]
        for key, name, body in steps:
            if key not in wanted:
                continue
            if key in {"kill", "redis"} and len(stack.containers("worker")) < 2:
                stack.compose("up", "-d", "--scale", "worker=2")
                stack.wait_healthy(workers=2)
            check.step(name, body)
    except CheckFailed as exc:
        log(f"FAIL  {exc}")
        check.outcomes.append(Outcome("setup", "FAIL", str(exc), 0.0))
    finally:
        failed = [o for o in check.outcomes if o.verdict == "FAIL"]
        if failed:
            log(f"--- logs (last 40 lines per service) ---\n{stack.logs()}")
        if not args.keep:
            t = time.monotonic()
            with contextlib.suppress(Exception):
                stack.compose("down", "-v", timeout=300)
            timings["down -v"] = time.monotonic() - t
        total = time.monotonic() - started
        counts = {v: sum(o.verdict == v for o in check.outcomes) for v in ("PASS", "FAIL", "SKIP")}
        log(
            "timings: "
            + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items())
            + f"; total {total:.0f} s"
        )
        summary = f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"
        log(summary)
        if not failed and not counts["SKIP"] and wanted == set(ALL_CHECKS):
            stamp = {
                "digest": deployment_digest(),
                "date": datetime.now(UTC).strftime("%Y-%m-%d"),
                "summary": summary,
                "seconds": round(total),
            }
            STAMP.write_text(json.dumps(stamp, indent=1) + "\n")
            log(f"wrote {STAMP.relative_to(REPO)}: commit it with the files it stands for")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
