"""`optistudio up --host` beyond this machine with no password and no OpenID Connect refuses to
start unless `--allow-open` (OPTISTUDIO_ALLOW_OPEN) is given, and says why (issue 39, case 10).
Loopback hosts start as before.

The refusals run in a child process whose working and home folders are empty, so no
`.streamlit/secrets.toml` of the machine running the tests decides them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from optistudio.cli import build_parser
from optistudio.cli.exposure import check_exposure, is_loopback
from optistudio.cli.up import up_settings
from optistudio.services.settings import Settings

LOOPBACK = [
    "127.0.0.1",
    "127.8.9.10",
    "::1",
    "[::1]",
    "localhost",
    "LocalHost.",
    "::ffff:127.0.0.1",
]
BEYOND = ["0.0.0.0", "", "::", "192.168.1.5", "10.0.0.1", "studio.example.com"]
OIDC_CONFIGURED = "from optistudio.studio.login_config import oidc_configured as c; print(c())"
"""Run in a folder: whether the studio started there would ask for an OpenID Connect sign-in."""


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_hosts_are_this_machine(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize("host", BEYOND, ids=[h or "empty" for h in BEYOND])
def test_other_hosts_are_beyond_it(host: str) -> None:
    assert not is_loopback(host)


def run_in(folder: Path, argv: list[str], **variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPTISTUDIO_")}
    env.update(HOME=str(folder), OPTISTUDIO_DATA_DIR=str(folder / "data"), **variables)
    return subprocess.run(
        [sys.executable, *argv], cwd=folder, env=env, capture_output=True, text=True, timeout=120
    )


def test_up_on_every_interface_with_no_login_refuses_in_one_sentence(tmp_path: Path) -> None:
    done = run_in(tmp_path, ["-m", "optistudio.cli", "up", "--host", "0.0.0.0"])

    assert done.returncode == 2, done.stderr
    first = done.stderr.splitlines()[0]
    assert first == (
        "error: Refusing to serve the studio on 0.0.0.0 with no password and no OpenID Connect: "
        "anyone who can reach that address could upload models and run jobs."
    )
    assert "--allow-open" in done.stderr and "OPTISTUDIO_STUDIO_PASSWORD" in done.stderr
    assert not (tmp_path / "data").exists()  # refused before migrating or starting anything


def test_ui_on_every_interface_with_no_login_refuses_too(tmp_path: Path) -> None:
    """`optistudio ui` (the compose studio's command) reads the host from its variable."""
    done = run_in(tmp_path, ["-m", "optistudio.cli", "ui"], OPTISTUDIO_HOST="0.0.0.0")

    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: Refusing to serve the studio on 0.0.0.0")


def test_oidc_secrets_count_as_a_login(tmp_path: Path) -> None:
    (tmp_path / ".streamlit").mkdir()
    secrets = tmp_path / ".streamlit" / "secrets.toml"
    secrets.write_text('[other]\nkey = "value"\n')
    without = run_in(tmp_path, ["-c", OIDC_CONFIGURED])
    secrets.write_text('[auth]\nredirect_uri = "http://studio.example.com/oauth2callback"\n')

    done = run_in(tmp_path, ["-c", OIDC_CONFIGURED])

    assert (without.stdout.strip(), done.stdout.strip()) == ("False", "True"), done.stderr


def test_allow_open_lets_it_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPTISTUDIO_ALLOW_OPEN", "1")

    check_exposure(Settings(host="0.0.0.0"))  # warns, does not raise
    check_exposure(Settings(host="0.0.0.0", allow_open=True))


def test_the_allow_open_option_sets_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("OPTISTUDIO_")]:
        monkeypatch.delenv(name)
    parser = build_parser()

    assert up_settings(parser.parse_args(["up", "--allow-open"])).allow_open
    assert not up_settings(parser.parse_args(["up"])).allow_open


def test_loopback_or_a_password_starts_without_allow_open() -> None:
    check_exposure(Settings(host="127.0.0.1"))
    check_exposure(Settings(host="0.0.0.0", studio_password=SecretStr("s3cret")))


def test_help_and_readme_name_the_option_beside_its_variable(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["up", "--help"])
    shown = capsys.readouterr().out

    entry = " ".join(shown.split("--allow-open", 1)[1].split())
    assert "(OPTISTUDIO_ALLOW_OPEN; default False)" in entry, shown
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    assert "| `OPTISTUDIO_ALLOW_OPEN` | `--allow-open` |" in readme
