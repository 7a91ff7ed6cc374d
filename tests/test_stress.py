"""tests/stress.py's `beside`: the neighbour holds the last core while the command runs pinned
and then busy, gets every core once both runs end, and every failure is the exit status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

STRESS = Path(__file__).resolve().parent / "stress.py"
CORES = sorted(os.sched_getaffinity(0))

pytestmark = pytest.mark.skipif(len(CORES) < 2, reason="beside needs two cores")

# The neighbour: its cores at the start (then `started`), then (once the busy run has written
# `ran`) its cores when they change, for up to 20 s.
NEIGHBOUR = """
import os, pathlib, sys, time
folder = pathlib.Path(sys.argv[1])
print("start", sorted(os.sched_getaffinity(0)), flush=True)
(folder / "started").touch()
while not (folder / "ran").exists():
    time.sleep(0.05)
deadline = time.monotonic() + 20
while len(os.sched_getaffinity(0)) == 1 and time.monotonic() < deadline:
    time.sleep(0.05)
print("end", sorted(os.sched_getaffinity(0)), flush=True)
sys.exit(int(sys.argv[2]))
"""
# The command: its cores, once per run; the second run (busy) writes `ran`. It waits for the
# neighbour's start first: on a loaded machine both trivial runs could end, and the neighbour be
# given every core, before its Python had started and read its cores (CI, 2026-12-07).
COMMAND = """
import os, pathlib, sys, time
folder = pathlib.Path(sys.argv[1])
deadline = time.monotonic() + 60
while not (folder / "started").exists() and time.monotonic() < deadline:
    time.sleep(0.02)
run = "busy" if (folder / "pinned").exists() else "pinned"
(folder / run).write_text(str(sorted(os.sched_getaffinity(0))))
if run == "busy":
    (folder / "ran").touch()
sys.exit(int(sys.argv[2]) if run == "busy" else 0)
"""


def beside(folder: Path, *, neighbour_exit: int = 0, command_exit: int = 0) -> tuple[int, str]:
    (folder / "neighbour.py").write_text(NEIGHBOUR)
    (folder / "command.py").write_text(COMMAND)
    other = f"{sys.executable} {folder / 'neighbour.py'} {folder} {neighbour_exit}"
    command = [sys.executable, str(folder / "command.py"), str(folder), str(command_exit)]
    done = subprocess.run(
        [sys.executable, str(STRESS), "beside", other, "--", *command],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout


def test_the_neighbour_holds_the_last_core_then_gets_every_core(tmp_path: Path) -> None:
    status, out = beside(tmp_path)

    assert status == 0, out
    assert (tmp_path / "pinned").read_text() == str([CORES[0]])
    assert (tmp_path / "busy").read_text() == str(CORES)
    assert f"start {[CORES[-1]]}" in out and f"end {CORES}" in out
    assert "kept busy by the neighbour" in out
    assert out.index("both runs ended") < out.index("start [")  # its output after theirs


@pytest.mark.parametrize(("neighbour_exit", "command_exit"), [(3, 0), (0, 4)])
def test_a_failure_of_either_is_the_exit_status(
    tmp_path: Path, neighbour_exit: int, command_exit: int
) -> None:
    status, out = beside(tmp_path, neighbour_exit=neighbour_exit, command_exit=command_exit)

    assert status == (neighbour_exit or command_exit), out
