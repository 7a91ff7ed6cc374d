"""Usage telemetry of the tools we embed is off in every process we start."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

TELEMETRY_OFF = {
    # Streamlit's config option browser.gatherUsageStats.
    "STREAMLIT_BROWSER_GATHER_USAGE_STATS": "false",
    # NNCF sends no telemetry when this is set (nncf/telemetry/wrapper.py checks it).
    "NNCF_CI": "1",
}
"""Environment switches. OpenVINO's own telemetry reads a consent file instead: see below."""


def telemetry_off_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """A copy of the environment with every known telemetry switch turned off."""
    env = dict(os.environ if base is None else base)
    env.update(TELEMETRY_OFF)
    return env


def opt_out_of_openvino() -> None:
    """Record the opt-out in OpenVINO's consent file through its own tool, when installed."""
    tool = shutil.which("opt_in_out") or _venv_tool("opt_in_out")
    if tool:
        subprocess.run([tool, "--opt_out"], capture_output=True, check=False, timeout=30)


def _venv_tool(name: str) -> str | None:
    import sys

    candidate = Path(sys.executable).parent / name
    return str(candidate) if candidate.exists() else None
