"""A real OpenID Connect provider for the browser tests: `oidc-provider-mock` in its own process.

It serves discovery, the authorization page, the token endpoint (signed ID tokens), userinfo,
JWKS and end-session on 127.0.0.1, like a company's identity provider would. Unregistered
clients are accepted with any secret, so the studio's client id and secret need no registration
step (the studio's port is only known once it runs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from optistudio.cli.launcher import free_port


@dataclass(frozen=True)
class Provider:
    url: str
    log_path: Path
    process: subprocess.Popen[bytes]

    @property
    def metadata_url(self) -> str:
        return f"{self.url}/.well-known/openid-configuration"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-5000:]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=20)


@dataclass(frozen=True)
class Person:
    sub: str
    name: str
    email: str

    def claims_json(self) -> str:
        return json.dumps({"sub": self.sub, "name": self.name, "email": self.email})


@contextmanager
def running_provider(log_path: Path, people: list[Person]) -> Iterator[Provider]:
    """Start the provider with these predefined people; stop it on exit."""
    port = free_port()
    command = [sys.executable, "-m", "oidc_provider_mock", "--host", "127.0.0.1"]
    command += ["--port", str(port)]
    for person in people:
        command += ["--user-claims", person.claims_json()]
    env = dict(os.environ, NO_COLOR="1")
    with log_path.open("w") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        provider = Provider(f"http://127.0.0.1:{port}", log_path, process)
        try:
            _wait_for_discovery(provider)
            yield provider
        finally:
            provider.stop()


def _wait_for_discovery(provider: Provider) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if provider.process.poll() is not None:
            raise AssertionError(f"the OIDC provider exited:\n{provider.log()}")
        try:
            with urllib.request.urlopen(provider.metadata_url, timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the OIDC provider did not answer within 60 s:\n{provider.log()}")


def secrets_toml(provider: Provider, *, client_secret: str, cookie_secret: str) -> str:
    """The studio's `[auth]` section for this provider. `{port}` is filled in by Streamlit."""
    return "\n".join(
        [
            "[auth]",
            'redirect_uri = "http://127.0.0.1:{port}/oauth2callback"',
            f'cookie_secret = "{cookie_secret}"',
            'client_id = "optistudio-studio"',
            f'client_secret = "{client_secret}"',
            f'server_metadata_url = "{provider.metadata_url}"',
            "",
        ]
    )
