"""`optistudio serve`: a PipelineOptimizer behind HTTP, speaking the KServe v2 protocol.

The standard library's ThreadingHTTPServer runs one thread per connection; each infer request
becomes one pipeline request (`PipelineOptimizer.submit`), so requests on concurrent
connections leave in one batch under the pipeline's rule (`optistudio.core.batching.pipeline`).
Bodies are `optistudio.core.batching.kserve`'s. Endpoints:
  GET  /v2/health/live, /v2/health/ready       200 while serving
  GET  /v2                                     server metadata
  GET  /v2/models/{name}[/versions/1]          model metadata (tensors, v2 datatypes)
  GET  /v2/models/{name}[/versions/1]/ready    200
  POST /v2/models/{name}[/versions/1]/infer    the outputs, JSON
A request the server cannot take is a 400 with {"error": ...}, an unknown model 404, a full
queue 503, a failed batch 500, an answer later than `answer_timeout_s` 504.

The load report (`ServeReport`) covers every infer answered while the server ran: throughput =
answered / (last answer - first arrival), latency from the body being read to the answer being
ready (p50, p99), and the mean size of the batches the requests ran in.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import ExitStack
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.batching import kserve
from optistudio.core.batching.collector import frozen_heap
from optistudio.core.batching.pipeline_optimizer import PipelineOptimizer
from optistudio.core.errors import (
    InvalidSpec,
    OptistudioError,
    PipelineClosed,
    QueueFull,
)

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 512 * 1024 * 1024
MODEL_PATH = re.compile(r"^/v2/models/([^/]+)(?:/versions/([^/]+))?(/ready|/infer)?$")


class ServeReport(BaseModel):
    """What a server answered while it ran."""

    model_config = ConfigDict(extra="forbid")

    model: str
    url: str
    seconds: float = Field(description="How long the server ran.")
    requests: int = Field(description="Infer requests answered with outputs.")
    failed: int = Field(description="Infer requests answered with an error.")
    throughput: float | None = Field(description="Answered / (last answer - first arrival).")
    p50_ms: float | None
    p99_ms: float | None
    mean_batch_size: float | None = Field(description="Mean size of the requests' batches.")
    settings: dict[str, Any] = Field(description="The batching setting served.")

    def lines(self) -> list[str]:
        """The report in words, for a terminal."""
        head = f"served {self.requests} request(s) of {self.model} in {self.seconds:.1f} s"
        if not self.requests:
            return [head + (f", {self.failed} failed" if self.failed else "")]
        return [
            head + (f", {self.failed} failed" if self.failed else ""),
            f"throughput {self.throughput or 0.0:.1f} req/s, p50 {self.p50_ms:.2f} ms, "
            f"p99 {self.p99_ms:.2f} ms, mean batch {self.mean_batch_size:.2f} "
            f"(max batch {self.settings['max_batch_size']}, timeout "
            f"{self.settings['timeout_ms']:g} ms, {self.settings['instances']} instance(s))",
        ]


class _Ledger:
    """Arrival, answer and batch size of every answered request, and the failures."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arrived: list[float] = []
        self.answered: list[float] = []
        self.batches: list[int] = []
        self.failed = 0

    def served(self, arrived: float, batch_size: int) -> None:
        with self.lock:
            self.arrived.append(arrived)
            self.answered.append(time.perf_counter())
            self.batches.append(batch_size)

    def failure(self) -> None:
        with self.lock:
            self.failed += 1

    def figures(self) -> dict[str, Any]:
        with self.lock:
            arrived, answered = np.asarray(self.arrived), np.asarray(self.answered)
            batches, failed = np.asarray(self.batches), self.failed
        if not len(arrived):
            empty = dict.fromkeys(("throughput", "p50_ms", "p99_ms", "mean_batch_size"))
            return {"requests": 0, "failed": failed, **empty}
        latency = (answered - arrived) * 1000
        span = float(answered.max() - arrived.min())
        return {
            "requests": len(arrived),
            "failed": failed,
            "throughput": len(arrived) / span if span > 0 else None,
            "p50_ms": float(np.percentile(latency, 50)),
            "p99_ms": float(np.percentile(latency, 99)),
            "mean_batch_size": float(batches.mean()),
        }


class KServeServer:
    """A loaded PipelineOptimizer (made by `from_file`) served over HTTP; a context manager."""

    def __init__(
        self,
        optimizer: PipelineOptimizer,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        answer_timeout_s: float = 60.0,
    ) -> None:
        if optimizer.document is None:
            raise InvalidSpec(
                "The server needs the model's pipeline.json to name its tensors.",
                hint="Load it with PipelineOptimizer.from_file(BUNDLE_OR_PIPELINE_JSON).",
            )
        self.optimizer, self.document = optimizer, optimizer.document
        self.answer_timeout_s = answer_timeout_s
        self.ledger = _Ledger()
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.kserve = self  # type: ignore[attr-defined]  # the handler's way back
        self._thread: threading.Thread | None = None
        self._held = ExitStack()  # what `start` holds until `stop`
        self._started = time.perf_counter()
        self._stopped: float | None = None

    @property
    def url(self) -> str:
        address, port = self.httpd.server_address[:2]
        host = address.decode() if isinstance(address, bytes) else str(address)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}"

    def start(self) -> KServeServer:
        """Serve from a background thread; returns at once. Until `stop` the heap alive now is
        kept out of Python's collections (`frozen_heap`): a full collection holds every
        serving thread for as long as it walks the process."""
        self._held.enter_context(frozen_heap())
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="kserve-http", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop taking connections (idempotent); the optimizer is the caller's to close."""
        if self._stopped is not None:
            return
        self._stopped = time.perf_counter()
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join()
            self._held.close()
        self.httpd.server_close()

    def report(self) -> ServeReport:
        until = self._stopped if self._stopped is not None else time.perf_counter()
        return ServeReport(
            model=self.document.name,
            url=self.url,
            seconds=until - self._started,
            settings=self.optimizer.settings.model_dump(mode="json"),
            **self.ledger.figures(),
        )

    def __enter__(self) -> KServeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def infer(self, body: bytes, header_length: int | None) -> dict[str, Any]:
        """One infer request answered (raises OptistudioError for what the caller got wrong)."""
        arrived = time.perf_counter()
        request, binary = kserve.parse_request(body, header_length)
        kserve.requested_outputs(request, [t.name for t in self.document.outputs])
        feeds = kserve.decode_inputs(request, binary)
        response = self.optimizer.submit(feeds).result(self.answer_timeout_s)
        parameters = {
            "batch_size": response.batch_size,
            "queue_ms": round(response.queue_ms, 3),
            "compute_ms": round(response.compute_ms, 3),
        }
        answer = kserve.infer_response(self.document, request, response.outputs, parameters)
        self.ledger.served(arrived, response.batch_size)
        return answer


SERVER_METADATA = {"name": "optistudio", "version": "1", "extensions": ["binary_tensor_data"]}
"""GET /v2: who answers, and the protocol extension it reads (binary tensors in requests)."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Triton's clients reuse their connections
    timeout = 60  # an idle kept-alive connection's thread ends after this many seconds

    @property
    def kserve(self) -> KServeServer:
        return self.server.kserve  # type: ignore[attr-defined,no-any-return]

    def do_GET(self) -> None:  # noqa: N802 - the name http.server calls
        document = self.kserve.document
        if self.path in ("/v2/health/live", "/v2/health/ready"):
            return self._send(HTTPStatus.OK, {"live": True, "ready": True})
        if self.path == "/v2":
            return self._send(HTTPStatus.OK, SERVER_METADATA)
        match = MODEL_PATH.match(self.path)
        if match is None or match.group(3) == "/infer":
            return self._send(HTTPStatus.NOT_FOUND, {"error": f"No endpoint GET {self.path}."})
        if not self._ours(match):
            return None
        if match.group(3) == "/ready":
            return self._send(HTTPStatus.OK, {"name": document.name, "ready": True})
        return self._send(HTTPStatus.OK, kserve.model_metadata(document))

    def do_POST(self) -> None:  # noqa: N802 - the name http.server calls
        match = MODEL_PATH.match(self.path)
        if match is None or match.group(3) != "/infer":
            self._drain()
            return self._send(HTTPStatus.NOT_FOUND, {"error": f"No endpoint POST {self.path}."})
        if not self._ours(match):
            return None
        status, payload = self._answer()
        if status != HTTPStatus.OK:
            self.kserve.ledger.failure()
        self._send(status, payload)

    def _answer(self) -> tuple[HTTPStatus, dict[str, Any]]:
        try:
            body = self._body()
            return HTTPStatus.OK, self.kserve.infer(body, self._header_length())
        except (QueueFull, PipelineClosed) as exc:
            return HTTPStatus.SERVICE_UNAVAILABLE, {"error": exc.message}
        except InvalidSpec as exc:
            return HTTPStatus.BAD_REQUEST, {"error": _said(exc)}
        except OptistudioError as exc:
            return HTTPStatus.INTERNAL_SERVER_ERROR, {"error": _said(exc)}
        except FutureTimeout:
            wait = self.kserve.answer_timeout_s
            return HTTPStatus.GATEWAY_TIMEOUT, {"error": f"No answer within {wait:g} s."}

    def _header_length(self) -> int | None:
        """The binary extension's JSON length, if the request uses it."""
        header = self.headers.get("Inference-Header-Content-Length")
        if header is None:
            return None
        if not header.strip().isdigit():
            raise InvalidSpec(f"Inference-Header-Content-Length is {header!r}, not a number.")
        return int(header)

    def _ours(self, match: re.Match[str]) -> bool:
        """True for this model at version 1 (or none); else answers 404 and returns False."""
        name, version = match.group(1), match.group(2)
        if name == self.kserve.document.name and version in (None, kserve.VERSION):
            return True
        self._drain()
        self._send(
            HTTPStatus.NOT_FOUND,
            {
                "error": f"No model {name!r} version {version or kserve.VERSION} here; this server "
                f"serves {self.kserve.document.name!r} version {kserve.VERSION}."
            },
        )
        return False

    def _body(self) -> bytes:
        length = _length(self.headers.get("Content-Length"))
        if not 0 < length <= MAX_BODY_BYTES:
            self.close_connection = True  # its body is not read: the connection is out of step
            raise InvalidSpec(
                f"An infer request needs a body of 1 to {MAX_BODY_BYTES} bytes with its "
                f"Content-Length; this one says {length}."
            )
        return self.rfile.read(length)

    def _drain(self) -> None:
        """Read a body nobody will use, so a kept-alive connection stays in step."""
        length = _length(self.headers.get("Content-Length"))
        if 0 < length <= MAX_BODY_BYTES:
            self.rfile.read(length)
        else:
            self.close_connection = True

    def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's name
        log.debug("%s " + format, self.address_string(), *args)


def _length(header: str | None) -> int:
    """Content-Length as a number; 0 when absent or not a number."""
    return int(header) if header and header.strip().isdigit() else 0


def _said(exc: OptistudioError) -> str:
    return f"{exc.message} {exc.hint}" if exc.hint else exc.message
