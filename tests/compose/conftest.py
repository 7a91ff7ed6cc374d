"""The `compose` marker: tests that run docker-compose.yml on a Docker engine."""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "compose: runs docker-compose.yml on a Docker engine (OPTISTUDIO_COMPOSE_CHECK=1)",
    )
