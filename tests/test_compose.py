"""docker-compose.yml, the Dockerfile and .dockerignore, checked by reading them.

These tests pin the deployment's promises: Redis 7 with appendonly, PostgreSQL 16, a one-shot
migration everything waits for, a scalable CPU worker, a GPU worker under a profile with an NVIDIA
reservation and one process, the studio and Flower, health checks, restart policies, required
secrets as ${VAR:?}, service commands that the real CLI parser accepts, and a build context of only
what the image copies. The stack itself is run for real by tests/compose/check_compose.py (`make
compose-check`, or tests/compose/test_compose_stack.py with OPTISTUDIO_COMPOSE_CHECK=1).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import tomllib

from optistudio.cli import build_parser

yaml = pytest.importorskip("yaml")

REPO = Path(__file__).resolve().parents[1]
COMPOSE_TEXT = (REPO / "docker-compose.yml").read_text()
COMPOSE: dict[str, Any] = yaml.safe_load(COMPOSE_TEXT)
PYPROJECT: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
APP_SERVICES = ["migrate", "worker", "worker-gpu", "studio"]
LONG_RUNNING = ["redis", "postgres", "worker", "worker-gpu", "studio", "flower"]
REQUIRED_SECRETS = {"POSTGRES_PASSWORD", "OPTISTUDIO_STUDIO_PASSWORD", "FLOWER_PASSWORD"}


def env_of(service: str) -> dict[str, str]:
    return {key: str(value) for key, value in SERVICES[service].get("environment", {}).items()}


def test_every_expected_service_is_there() -> None:
    assert set(SERVICES) == {
        "redis",
        "postgres",
        "migrate",
        "worker",
        "worker-gpu",
        "studio",
        "flower",
    }


def test_redis_7_keeps_queued_jobs_with_appendonly() -> None:
    redis = SERVICES["redis"]
    assert redis["image"].split(":")[1].startswith("7")
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(volume.endswith(":/data") for volume in redis["volumes"])


def test_postgres_16_with_a_required_password() -> None:
    postgres = SERVICES["postgres"]
    assert postgres["image"] == "postgres:16"
    assert postgres["environment"]["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")


def test_migration_runs_once_and_the_app_waits_for_it() -> None:
    migrate = SERVICES["migrate"]
    assert migrate["command"] == ["optistudio", "migrate"] and migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ["worker", "worker-gpu", "studio"]:
        depends = SERVICES[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
        assert depends["redis"]["condition"] == "service_healthy", name


def test_the_cpu_worker_can_be_scaled() -> None:
    worker = SERVICES["worker"]
    assert "container_name" not in worker and "ports" not in worker  # both would block --scale
    assert "profiles" not in worker
    assert worker["command"][:2] == ["optistudio", "worker"]
    assert "cpu" in worker["command"][worker["command"].index("--queues") + 1].split(",")


def test_the_gpu_worker_is_one_process_on_a_reserved_nvidia_device_under_a_profile() -> None:
    gpu = SERVICES["worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    command = gpu["command"]
    assert command[command.index("--queues") + 1] == "gpu"
    assert command[command.index("--concurrency") + 1] == "1"
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    assert len(device.get("device_ids", [])) == 1 or device.get("count") == 1


def test_long_running_services_have_health_checks_and_restart_policies() -> None:
    for name in LONG_RUNNING:
        service = SERVICES[name]
        assert service.get("restart") in {"unless-stopped", "always", "on-failure"}, name
        assert service["healthcheck"]["test"], name


def test_required_secrets_are_required_and_none_is_written_down() -> None:
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE_TEXT))
    assert required >= REQUIRED_SECRETS
    assert env_of("studio")["OPTISTUDIO_STUDIO_PASSWORD"].startswith(
        "${OPTISTUDIO_STUDIO_PASSWORD:?"
    )
    for name, service in SERVICES.items():
        for key, value in service.get("environment", {}).items():
            if re.search(r"PASSWORD|SECRET|AUTH", key):
                assert "${" in str(value), f"{name}.{key} holds a literal secret"


def test_the_app_services_share_the_database_broker_and_artifacts() -> None:
    for name in APP_SERVICES:
        env = env_of(name)
        assert env["OPTISTUDIO_DATABASE_URL"].startswith("postgresql+psycopg://"), name
        assert env["OPTISTUDIO_BROKER_URL"] == "redis://redis:6379/0", name
        assert "OPTISTUDIO_ARTIFACT_STORE" in env, name
        assert "artifacts:/data" in SERVICES[name]["volumes"], name


def test_service_commands_are_real_cli_commands() -> None:
    parser = build_parser()
    for name in APP_SERVICES:
        command = SERVICES[name]["command"]
        assert command[0] == "optistudio", name
        parser.parse_args(command[1:])  # exits (SystemExit) on an unknown command or flag


def test_the_image_installs_what_the_services_use() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    extras = re.search(r"^ARG EXTRAS=([\w,]+)$", dockerfile, re.MULTILINE)
    assert extras and {"postgres", "s3"} <= set(extras.group(1).split(","))
    optional = PYPROJECT["project"]["optional-dependencies"]
    assert set(extras.group(1).split(",")) <= set(optional)
    # The dependencies get a layer of their own, before the code is copied; then the project.
    deps = dockerfile.index('"$EXTRAS" >/tmp/requirements.txt')
    assert deps < dockerfile.index("COPY core core")
    assert dockerfile.index("COPY core core") < dockerfile.index(
        'pip install --no-cache-dir --no-deps -e ".[$EXTRAS]"'
    )
    assert "ARG EXTRA_PIP" in dockerfile
    assert SERVICES["worker-gpu"]["build"]["args"]["EXTRA_PIP"]


def test_the_build_context_is_only_what_the_image_copies() -> None:
    """.dockerignore ignores everything but the Dockerfile's COPY sources (no .venv, no data/)."""
    dockerfile = (REPO / "Dockerfile").read_text()
    copied = {
        source
        for line in dockerfile.splitlines()
        if line.startswith("COPY ")
        for source in line.split()[1:-1]
    }
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert patterns[0] == "*"
    assert {p[1:] for p in patterns if p.startswith("!")} == copied


def _loaded_at_start(entries: list[str]) -> dict[str, list[str]]:
    """The modules of ours the entries load, following module-level imports (tests/test_layers.py
    reads them: not those inside functions or `if TYPE_CHECKING`), each with the third-party
    names it imports at module level."""
    from test_layers import MODULES, imports, is_ours, resolve

    seen: dict[str, list[str]] = {}
    pending = list(entries)
    while pending:
        module = pending.pop()
        if module in seen or module not in MODULES:
            continue
        seen[module] = []
        pending.append(module.rpartition(".")[0])  # a package's __init__ runs before its modules
        for name in imports(MODULES[module], top_level=True):
            if is_ours(name):
                pending.append(resolve(name))
            elif name.partition(".")[0] not in {*sys.stdlib_module_names, "__future__"}:
                seen[module].append(name)
    return seen


def test_every_module_the_services_load_is_installed_in_the_image() -> None:
    """The image installs the core dependencies and the Dockerfile's EXTRAS only (no samples, no
    dev, no qat or litert): a module that the migrate, worker or studio process loads at start
    and that imports anything else at load time would fail in the containers while every host
    suite, whose venv has more, passes. Optional runtimes stay behind imports inside functions."""
    from importlib.metadata import PackageNotFoundError, packages_distributions, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    extras = re.search(r"^ARG EXTRAS=([\w,]+)$", (REPO / "Dockerfile").read_text(), re.MULTILINE)
    assert extras
    project = PYPROJECT["project"]
    optional = project["optional-dependencies"]
    pending = [Requirement(spec) for spec in project["dependencies"]]
    pending += [
        Requirement(spec) for extra in extras.group(1).split(",") for spec in optional[extra]
    ]
    installed: set[str] = set()
    while pending:
        requirement = pending.pop()
        name = canonicalize_name(requirement.name)
        if name in installed:
            continue
        installed.add(name)
        try:
            children = [Requirement(spec) for spec in requires(requirement.name) or []]
        except PackageNotFoundError:
            continue
        pending += [c for c in children if c.marker is None or c.marker.evaluate({"extra": ""})]
    from test_layers import MODULES

    entries = [
        "optistudio.cli.__main__",
        "optistudio.studio.app",
        *(name for name in MODULES if name.startswith(("optistudio.workers.", "optistudio.studio.views."))),
        *(name for name in MODULES if name.startswith("optistudio.migrations.")),
    ]  # fmt: skip
    loaded = _loaded_at_start(entries)
    assert "optistudio.core.backends.base" in loaded and len(loaded) > 50
    providers = packages_distributions()
    missing = [
        f"{module}: {name}"
        for module, names in sorted(loaded.items())
        for name in names
        if not {canonicalize_name(d) for d in providers.get(name.partition(".")[0], [name])}
        & installed
    ]
    assert not missing, f"loaded at start but not installed in the image: {missing}"


def test_ci_runs_the_compose_check_again_only_when_the_deployment_files_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "check_compose", REPO / "tests/compose/check_compose.py"
    )
    assert spec and spec.loader
    check = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "check_compose", check)  # its dataclasses look it up
    spec.loader.exec_module(check)
    (tmp_path / "tests/compose").mkdir(parents=True)
    (tmp_path / "migrations").mkdir()
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim\n")
    (tmp_path / "migrations/0001.py").write_text("revision = '0001'\n")
    (tmp_path / "core.py").write_text("x = 1\n")  # not a deployment file
    monkeypatch.setattr(check, "REPO", tmp_path)
    monkeypatch.setattr(check, "STAMP", tmp_path / "tests/compose/passed.json")
    monkeypatch.setattr(check, "DEPLOYMENT_FILES", ["Dockerfile", "migrations", "tests/compose"])

    assert check.needed() == 0  # never passed
    check.STAMP.write_text(json.dumps({"digest": check.deployment_digest(), "date": "d"}))
    assert check.needed() == 1  # the stamp itself is not part of the digest
    (tmp_path / "core.py").write_text("x = 2\n")
    assert check.needed() == 1
    (tmp_path / "migrations/0002.py").write_text("revision = '0002'\n")
    assert check.needed() == 0
