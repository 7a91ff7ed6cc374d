"""`optistudio ARGS` run in the test's own process, read back as a finished subprocess would be.

A CLI test that starts `python -m optistudio.cli` pays the command's imports each time (3-6 s
of CPU on 2 cores: ONNX, OpenVINO, SQLAlchemy, pandas), which was a third of `make test`. This
runs `optistudio.cli.main` instead, with the same environment variables set for the call, stdout
and stderr captured, SystemExit read as the exit status, and an unexpected exception written to
stderr as a traceback with status 1, as the interpreter would. What only a real process shows
(the entry point, C-level output on file descriptors, library logging set up at import, one
JSON document on fd 1) is tested through real processes in tests/test_cli_json.py and the
subprocess tests beside it.
"""

from __future__ import annotations

import io
import os
import subprocess
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, redirect_stderr, redirect_stdout


def run_in_process(
    args: list[str], *, set_env: Mapping[str, str], unset_env: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    from optistudio.cli import main

    out, err = io.StringIO(), io.StringIO()
    with _environment(set_env, unset_env), redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as stop:  # argparse's usage errors, a command's own exit
            code = _status(stop.code, err)
        except Exception:  # a bug: the interpreter prints it and exits 1
            traceback.print_exc(file=err)
            code = 1
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def _status(code: object, err: io.StringIO) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)
    return 1


@contextmanager
def _environment(set_env: Mapping[str, str], unset_env: tuple[str, ...]) -> Iterator[None]:
    from optistudio.services.settings import get_settings

    saved = {name: os.environ.get(name) for name in (*set_env, *unset_env)}
    os.environ.update(set_env)
    for name in unset_env:
        os.environ.pop(name, None)
    get_settings.cache_clear()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        get_settings.cache_clear()
