"""Run a command under one of the loads CI machines bring (`make test-stress`).

    python tests/stress.py pinned -- CMD...   CMD and everything it starts on one core only
    python tests/stress.py busy -- CMD...     CMD on every core, one of them kept busy
    python tests/stress.py beside 'OTHER' -- CMD...
        CMD pinned, then busy, while the shell command OTHER runs pinned to the last core as the
        neighbour (in place of the busy run's spinner); OTHER gets every core once both runs
        end, and its output is printed after theirs (CI: the zoo beside the stress runs)

A neighbour's steal or a one-core container is what breaks a test that asserts one machine's
speed; running the tests that read clocks (marker `timing`) both ways shows it before it lands.
The exit status is the command's (with `beside`, the first failure's of CMD's runs and OTHER).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import psutil

MODES = ("pinned", "busy")


def spin(core: int) -> None:
    """Keep `core` busy until killed (a neighbour that never sleeps)."""
    os.sched_setaffinity(0, {core})
    while True:
        pass


class Spinner:
    """A spinner on `core`, started now, or when `after` (a neighbour still running) ends: the
    core stays busy for as long as the run it stresses."""

    def __init__(self, core: int, after: subprocess.Popen[bytes] | None = None) -> None:
        self.core = core
        self.process: multiprocessing.Process | None = None
        self.done = threading.Event()
        self.watcher: threading.Thread | None = None
        if after is None or after.poll() is not None:
            self._start()
        else:
            self.watcher = threading.Thread(target=self._start_after, args=(after,), daemon=True)
            self.watcher.start()

    def _start(self) -> None:
        self.process = multiprocessing.Process(target=spin, args=(self.core,), daemon=True)
        self.process.start()
        print(f"stress: core {self.core} kept busy by process {self.process.pid}", flush=True)

    def _start_after(self, after: subprocess.Popen[bytes]) -> None:
        while after.poll() is None:
            if self.done.wait(0.5):
                return
        if not self.done.is_set():
            self._start()

    def stop(self) -> None:
        self.done.set()
        if self.watcher is not None:
            self.watcher.join()
        if self.process is not None:
            self.process.kill()
            self.process.join()


def run(mode: str, command: list[str], neighbour: subprocess.Popen[bytes] | None = None) -> int:
    cores = sorted(os.sched_getaffinity(0))
    if mode == "pinned":
        print(f"stress: pinned to core {cores[0]} of {len(cores)}", flush=True)
        return subprocess.call(command, preexec_fn=lambda: os.sched_setaffinity(0, {cores[0]}))
    if neighbour is not None and neighbour.poll() is None:
        print(f"stress: core {cores[-1]} of {len(cores)} kept busy by the neighbour", flush=True)
    else:
        print(f"stress: on {len(cores)} cores", flush=True)
    spinner = Spinner(cores[-1], after=neighbour)
    try:
        return subprocess.call(command)
    finally:
        spinner.stop()


def release(pid: int, cores: set[int]) -> None:
    """Every thread of `pid` and of the processes under it allowed on `cores` (a process's
    affinity is its threads', each set on its own); twice, for a process started meanwhile."""
    for _ in range(2):
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(pid)
            for process in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    for thread in process.threads():
                        with contextlib.suppress(OSError):
                            os.sched_setaffinity(thread.id, cores)


def beside(other: str, command: list[str]) -> int:
    """`command` pinned, then busy, with the shell command `other` as the neighbour on the last
    core; `other` then runs on every core to its end. On one core, one after the other."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        statuses = [run(mode, command) for mode in MODES]
        return next((s for s in statuses if s), 0) or subprocess.call(other, shell=True)
    started = time.monotonic()
    with tempfile.TemporaryFile() as log:
        neighbour = subprocess.Popen(
            other,
            shell=True,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: os.sched_setaffinity(0, {cores[-1]}),
        )
        print(f"stress: `{other}` (process {neighbour.pid}) on core {cores[-1]}", flush=True)
        try:
            statuses = [run(mode, command, neighbour) for mode in MODES]
        finally:
            release(neighbour.pid, set(cores))
        now = "runs on every core now" if neighbour.poll() is None else "had ended"
        print(f"stress: both runs ended after {time.monotonic() - started:.0f} s; `{other}` {now}")
        ended = neighbour.wait()
        log.seek(0)
        sys.stdout.flush()
        shutil.copyfileobj(log, sys.stdout.buffer)
        sys.stdout.buffer.flush()
    print(f"stress: `{other}` ended (exit {ended}) after {time.monotonic() - started:.0f} s")
    return next((s for s in statuses if s), 0) or ended


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[0] == "beside" and argv[2] == "--":
        return beside(argv[1], argv[3:])
    if len(argv) < 3 or argv[0] not in MODES or argv[1] != "--":
        print(
            f"usage: python tests/stress.py {{{'|'.join(MODES)}}} -- CMD...\n"
            "       python tests/stress.py beside 'OTHER' -- CMD...",
            file=sys.stderr,
        )
        return 2
    return run(argv[0], argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
