"""Run a command under one of the loads CI machines bring (`make test-stress`).

    python tests/stress.py pinned -- CMD...   CMD and everything it starts on one core only
    python tests/stress.py busy -- CMD...     CMD on every core, one of them kept busy

A neighbour's steal or a one-core container is what breaks a test that asserts one machine's
speed; running the tests that read clocks (marker `timing`) both ways shows it before it lands.
The exit status is the command's.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys

MODES = ("pinned", "busy")


def spin(core: int) -> None:
    """Keep `core` busy until killed (a neighbour that never sleeps)."""
    os.sched_setaffinity(0, {core})
    while True:
        pass


def run(mode: str, command: list[str]) -> int:
    cores = sorted(os.sched_getaffinity(0))
    if mode == "pinned":
        print(f"stress: pinned to core {cores[0]} of {len(cores)}", flush=True)
        return subprocess.call(command, preexec_fn=lambda: os.sched_setaffinity(0, {cores[0]}))
    spinner = multiprocessing.Process(target=spin, args=(cores[-1],), daemon=True)
    spinner.start()
    print(
        f"stress: core {cores[-1]} of {len(cores)} kept busy by process {spinner.pid}", flush=True
    )
    try:
        return subprocess.call(command)
    finally:
        spinner.kill()
        spinner.join()


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[0] not in MODES or argv[1] != "--":
        print(f"usage: python tests/stress.py {{{'|'.join(MODES)}}} -- CMD...", file=sys.stderr)
        return 2
    return run(argv[0], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
