"""`optistudio serve BUNDLE_OR_PIPELINE_JSON`: the model an export bundle (or a pipeline.json)
names, served over HTTP with the KServe v2 inference protocol (Triton's clients talk to it) and
batched by the project's runtime on the setting the file names, until Ctrl-C, SIGTERM or
--seconds; then a short load report (requests, throughput, p50/p99, mean batch size).

It listens on 127.0.0.1 by default. The server asks no password, so another --host follows
`optistudio up`'s rule (`optistudio.cli.exposure.is_loopback`): refused unless --allow-open
(OPTISTUDIO_ALLOW_OPEN=1) says the network is trusted, and then a warning.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from optistudio.cli.exposure import is_loopback
from optistudio.cli.output import print_json
from optistudio.cli.stack_settings import env_name
from optistudio.core.errors import InvalidSpec
from optistudio.services.settings import Settings

if TYPE_CHECKING:
    from optistudio.core.batching.pipeline_optimizer import PipelineOptimizer
    from optistudio.core.batching.serve_http import KServeServer

log = logging.getLogger(__name__)
DEFAULT_PORT = 8000


def add_serve_parser(commands: Any) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve a bundle's model over HTTP (KServe v2) with dynamic batching",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument(
        "source",
        type=Path,
        metavar="BUNDLE_OR_PIPELINE_JSON",
        help="an export bundle (.zip), its unzipped folder, or a pipeline.json with its model",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address (default 127.0.0.1)")
    serve.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="port (default 8000; 0 picks a free one)"
    )
    serve.add_argument("--seconds", type=float, help="stop after this long (default: Ctrl-C)")
    serve.add_argument(
        "--allow-open",
        action="store_true",
        help=f"listen on a --host beyond this machine ({env_name('allow_open')}=1)",
    )
    serve.add_argument("--json", action="store_true", help="the load report as one JSON object")


def command_serve(args: argparse.Namespace) -> int:
    from optistudio.core.batching.pipeline_optimizer import PipelineOptimizer  # heavy: here

    check_host(args.host, allow_open=args.allow_open)
    if args.seconds is not None and args.seconds <= 0:
        raise InvalidSpec(f"--seconds must be positive, got {args.seconds:g}.")
    optimizer = PipelineOptimizer.from_file(args.source)
    try:
        server = _listening(optimizer, args.host, args.port)
        with server:
            _say_ready(server, optimizer)
            _wait(args.seconds)
    finally:
        optimizer.close()
    report = server.report()
    if args.json:
        print_json(report.model_dump(mode="json"))
    else:
        print("\n".join(report.lines()))
    return 0


def check_host(host: str, *, allow_open: bool) -> None:
    """`up`'s rule for an address beyond this machine: refused unless allowed, then warned."""
    if is_loopback(host):
        return
    if allow_open or Settings().allow_open:
        log.warning("serving on %s: anyone who reaches it can run the model", host or "*")
        return
    raise InvalidSpec(
        f"Refusing to serve on {host or 'every interface'}: the server asks no password, so "
        "anyone who can reach that address could run the model.",
        hint="Keep --host 127.0.0.1 for this machine alone (a proxy in front can add a login), "
        f"or, on a network you trust, pass --allow-open ({env_name('allow_open')}=1).",
    )


def _listening(optimizer: PipelineOptimizer, host: str, port: int) -> KServeServer:
    from optistudio.core.batching.serve_http import KServeServer

    try:
        return KServeServer(optimizer, host=host, port=port)
    except OSError as exc:
        raise InvalidSpec(
            f"Cannot listen on {host}:{port}: {exc.strerror or exc}.",
            hint="Pick another --port (0 picks a free one).",
        ) from None


def _say_ready(server: KServeServer, optimizer: PipelineOptimizer) -> None:
    """The address, on stderr (stdout is the report's)."""
    settings, name = optimizer.settings, server.document.name
    note = f" {optimizer.note}" if optimizer.note else ""
    print(
        f"serving {name} at {server.url}/v2/models/{name} (KServe v2): max batch "
        f"{settings.max_batch_size}, timeout {settings.timeout_ms:g} ms, {settings.instances} "
        f"instance(s).{note} Ctrl-C stops.",
        file=sys.stderr,
        flush=True,
    )


STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""What stops the server, handled here whatever the process inherited: a shell that starts a
command in the background without job control (a CI script's `cmd &`) makes it ignore SIGINT,
and a server should still stop on it rather than serve on to its --seconds."""


def _wait(seconds: float | None) -> None:
    """Until `seconds` pass, Ctrl-C or SIGTERM (caught in the main thread only)."""
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, _interrupt) for sig in STOPPING_SIGNALS} if main else {}
    try:
        deadline = time.monotonic() + seconds if seconds is not None else None
        while deadline is None or time.monotonic() < deadline:
            time.sleep(0.2 if deadline is None else min(0.2, max(0.0, deadline - time.monotonic())))
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
