"""Usage telemetry of the tools we embed is off in every process we start.

Streamlit and NNCF read a switch from the environment (`TELEMETRY_OFF`). OpenVINO's telemetry
(`openvino_telemetry`, which `ov.convert_model` calls for every conversion) reads none: with no
consent file under the home folder it *sends*, each event from a fresh `multiprocessing` process
(under the spawn start method a whole new interpreter that imports the parent's `__main__`).
Its switch is that consent file, which `opt_out_of_openvino` writes: run by `make install`
(`python -m optistudio.services.telemetry`), the image's build, `optistudio up`, `optistudio
worker` and the test session's start.
"""

from __future__ import annotations

import os
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


def opt_out_of_openvino() -> Path | None:
    """Write OpenVINO's consent file as declined ("0") and remove the client id and usage
    counts its telemetry kept; returns the consent file, or None where OpenVINO's telemetry is
    not installed or its folder cannot be written.

    What `opt_in_out --opt_out` records, through the same library calls, without the one
    "declined" event that tool sends on the way out when no choice was recorded before."""
    try:
        from openvino_telemetry.backend.backend_ga4 import GA4Backend
        from openvino_telemetry.utils.cid import remove_cid_file
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
        from openvino_telemetry.utils.stats_processor import StatsProcessor
    except ImportError:  # OpenVINO is not installed: nothing sends
        return None
    checker = OptInChecker()
    if not checker.update_result(ConsentCheckResult.DECLINED):
        return None
    for name in (GA4Backend.cid_filename, GA4Backend.old_cid_filename):
        remove_cid_file(name)
    StatsProcessor().remove_stats_file()
    return Path(checker.consent_file())


def openvino_declined() -> bool:
    """Whether OpenVINO's telemetry would send nothing from this process's home folder (as
    `ov.convert_model` asks it: no dialog, CI or not)."""
    try:
        from openvino_telemetry.utils.opt_in_checker import ConsentCheckResult, OptInChecker
    except ImportError:
        return True
    result = OptInChecker().check(enable_opt_in_dialog=False, disable_in_ci=False)
    return bool(result == ConsentCheckResult.DECLINED)


if __name__ == "__main__":  # `make install` and the image's build
    consent = opt_out_of_openvino()
    print(f"OpenVINO telemetry: declined in {consent}" if consent else "OpenVINO telemetry: none")
