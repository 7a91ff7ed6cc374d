"""`optistudio up --port ...`: options that override the environment, listed by --help with the
variable each one overrides, and reaching the processes `up` starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from optistudio.cli import build_parser
from optistudio.cli.launcher import ROOT_WARNING_FILTER, free_port, stack_env
from optistudio.cli.stack_settings import STACK_SETTINGS
from optistudio.cli.up import OPTIONS as OPTIONS_OF_UP
from optistudio.cli.up import up_settings
from optistudio.core.errors import OptistudioError

OPTIONS = [  # the README's configuration table, as `up --help` must name it
    ("--host", "OPTISTUDIO_HOST", "127.0.0.1"),
    ("--port", "OPTISTUDIO_UI_PORT", "8501"),
    ("--data-dir", "OPTISTUDIO_DATA_DIR", "./data"),
    ("--database-url", "OPTISTUDIO_DATABASE_URL", None),
    ("--redis-port", "OPTISTUDIO_REDIS_PORT", "0"),
    ("--concurrency", "OPTISTUDIO_WORKER_CONCURRENCY", "1"),
    ("--queues", "OPTISTUDIO_QUEUES", "cpu"),
    ("--backends", "OPTISTUDIO_BACKENDS", None),
    ("--max-upload-mb", "OPTISTUDIO_MAX_UPLOAD_MB", "512"),
]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No OPTISTUDIO_* variable from the shell that runs the tests."""
    for name in [n for n in os.environ if n.startswith("OPTISTUDIO_")]:
        monkeypatch.delenv(name)
    return monkeypatch


@pytest.fixture(scope="module")
def up_help() -> str:
    done = subprocess.run(
        [sys.executable, "-m", "optistudio.cli", "up", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize(("flag", "variable", "default"), OPTIONS, ids=[o[0] for o in OPTIONS])
def test_help_lists_each_option_with_its_variable_and_default(
    up_help: str, flag: str, variable: str, default: str | None
) -> None:
    options = {"--" + e.split()[0]: " ".join(e.split()) for e in up_help.split("\n  --")[1:]}
    entry = options[flag]  # the option's lines, the wrapping joined
    assert f"({variable}" in entry, up_help
    if default is not None:
        assert f"default {default})" in entry, entry


def test_the_readme_table_names_each_option_beside_its_variable() -> None:
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    rows = [
        line.split("|")[1:3] for line in readme.splitlines() if line.startswith("| `OPTISTUDIO_")
    ]
    named = {variable.strip(" `"): option.strip(" `") for variable, option in rows}
    assert {variable: named.get(variable) for _, variable, _ in OPTIONS} == {
        variable: flag for flag, variable, _ in OPTIONS
    }


def test_every_setting_up_starts_with_has_its_option() -> None:
    assert [option.field for option in OPTIONS_OF_UP] == list(STACK_SETTINGS)


def test_options_override_the_environment(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    clean_env.setenv("OPTISTUDIO_UI_PORT", "1234")
    clean_env.setenv("OPTISTUDIO_HOST", "0.0.0.0")
    clean_env.setenv("OPTISTUDIO_QUEUES", "cpu")
    args = build_parser().parse_args(
        ["up", "--port", "5678", "--queues", "cpu,openvino", "--data-dir", str(tmp_path)]
    )

    settings = up_settings(args)

    assert settings.ui_port == 5678 and settings.queues == "cpu,openvino"
    assert settings.data_dir == tmp_path.resolve()
    assert settings.database_url == f"sqlite:///{tmp_path.resolve() / 'optistudio.db'}"
    assert settings.host == "0.0.0.0"  # not given: the variable holds


def test_without_options_the_defaults_are_unchanged(clean_env: pytest.MonkeyPatch) -> None:
    settings = up_settings(build_parser().parse_args(["up"]))
    assert (settings.host, settings.ui_port, settings.redis_port) == ("127.0.0.1", 8501, 0)
    assert (settings.worker_concurrency, settings.queues, settings.max_upload_mb) == (1, "cpu", 512)
    assert settings.data_dir == Path("data").resolve()


def test_the_started_processes_get_what_up_was_given(
    clean_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    clean_env.setenv("OPTISTUDIO_MAX_UPLOAD_MB", "100")
    args = build_parser().parse_args(
        ["up", "--max-upload-mb", "64", "--backends", "openvino", "--data-dir", str(tmp_path)]
    )

    env = stack_env(up_settings(args), redis_port=6400, ui_port=8600)

    assert env["OPTISTUDIO_MAX_UPLOAD_MB"] == "64" and env["OPTISTUDIO_BACKENDS"] == "openvino"
    assert env["OPTISTUDIO_DATA_DIR"] == str(tmp_path.resolve())
    assert (env["OPTISTUDIO_UI_PORT"], env["OPTISTUDIO_REDIS_PORT"]) == ("8600", "6400")
    assert env["OPTISTUDIO_BROKER_URL"] == "redis://127.0.0.1:6400/0"
    assert env["NNCF_CI"] == "1"  # telemetry stays off


@pytest.mark.parametrize(
    ("argv", "field"),
    [(["--port", "70000"], "ui_port"), (["--concurrency", "0"], "worker_concurrency")],
    ids=["port-out-of-range", "no-worker-process"],
)
def test_a_bad_option_value_is_a_readable_error(
    clean_env: pytest.MonkeyPatch, argv: list[str], field: str
) -> None:
    with pytest.raises(OptistudioError, match=field):
        up_settings(build_parser().parse_args(["up", *argv]))


@pytest.mark.integration
@pytest.mark.slow
def test_up_serves_where_its_options_say(tmp_path: Path) -> None:
    """A real `up`: the studio on --port (not the variable's), the database in --data-dir, and
    the worker consuming --queues."""
    port = free_port()
    env = dict(os.environ, OPTISTUDIO_UI_PORT=str(free_port()))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    data = tmp_path / "elsewhere"
    log_path = tmp_path / "up.log"
    argv = ["--port", str(port), "--data-dir", str(data), "--queues", "cpu,spare"]
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "optistudio.cli", "up", *argv],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_for(f"running at http://127.0.0.1:{port} ", log_path, process)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=10) as r:
            assert r.status == 200
        assert _worker_queues(f"sqlite:///{data / 'optistudio.db'}") == [["cpu", "spare"]]
    finally:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=60)


def _wait_for(text: str, log_path: Path, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 240
    while text not in log_path.read_text():
        assert process.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, log_path.read_text()
        time.sleep(0.3)


def _worker_queues(database_url: str) -> list[list[str]]:
    from optistudio.db.queries import live_workers
    from optistudio.db.session import make_session_factory, transaction

    with transaction(make_session_factory(database_url)) as s:
        return [list(w.queues) for w in live_workers(s, max_age_s=3600)]


def test_the_workers_warning_filter_is_taken_and_hides_celerys_warning_to_root() -> None:
    """The worker `up` starts runs with ROOT_WARNING_FILTER: Python takes it at start (no
    "Invalid -W option ignored" on stderr) and it hides Celery's warning to root, no other."""
    warn = (
        "import warnings; from celery.platforms import ROOT_DISCOURAGED, SecurityWarning; "
        "warnings.warn(SecurityWarning(ROOT_DISCOURAGED.format(uid=0, euid=0, gid=0, egid=0))); "
        "warnings.warn(SecurityWarning('another warning'))"
    )
    env = os.environ | {"PYTHONWARNINGS": ROOT_WARNING_FILTER}
    done = subprocess.run(
        [sys.executable, "-c", warn], env=env, capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert "Invalid -W option" not in done.stderr
    assert "superuser privileges" not in done.stderr
    assert "another warning" in done.stderr
