"""`optistudio serve`: a bundle's model over HTTP with the KServe v2 protocol, answered to
Triton's own HTTP client (tritonclient[http]) with the model's outputs, batched by our runtime
on the bundle's setting, and a load report when it stops."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from optistudio import PipelineOptimizer
from optistudio.cli import main
from optistudio.core.batching.serve_http import KServeServer
from optistudio.core.model.intake import inspect_model
from optistudio.core.report.bundle import BundleSource, write_bundle

WAIT_S = 60  # the longest a served process may take to start or stop


def make_bundle(model: Path, folder: Path, **serving: object) -> Path:
    setting = {"max_batch_size": 4, "timeout_ms": 2.0, "instances": 1} | serving
    source = BundleSource(
        name="tiny",
        model_path=model,
        info=inspect_model(model),
        coreml_precisions=[],
        serving=setting,
    )
    return write_bundle(source, folder / "bundle.zip").path


def direct(model: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def rows(count: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((count, 16)).astype(np.float32)


def request_of(x: np.ndarray, *, binary: bool) -> tuple[list, list]:
    tensor = triton.InferInput("x", list(x.shape), "FP32")
    tensor.set_data_from_numpy(x, binary_data=binary)
    return [tensor], [triton.InferRequestedOutput("y", binary_data=False)]


@pytest.fixture
def served(tiny_model: Path, tmp_path: Path) -> Iterator[KServeServer]:
    """The bundle served in this process on a free loopback port; batches wait up to 9 s for
    4 requests, so 4 sent at once leave as one batch."""
    bundle = make_bundle(tiny_model, tmp_path, timeout_ms=9_000.0)
    with PipelineOptimizer.from_file(bundle) as optimizer, KServeServer(optimizer) as server:
        yield server


def client_of(server: KServeServer, concurrency: int = 1) -> triton.InferenceServerClient:
    address = server.url.removeprefix("http://")
    return triton.InferenceServerClient(address, concurrency=concurrency, network_timeout=WAIT_S)


@pytest.mark.parametrize("binary", [False, True], ids=["json-tensors", "binary-tensors"])
def test_tritonclient_gets_the_models_outputs(
    served: KServeServer, tiny_model: Path, binary: bool
) -> None:
    client = client_of(served)
    x = rows(4, seed=3)  # four rows: a full batch, sent at once
    inputs, outputs = request_of(x, binary=binary)

    answer = client.infer("tiny", inputs, outputs=outputs, request_id="r1")

    np.testing.assert_allclose(answer.as_numpy("y"), direct(tiny_model, x), atol=1e-6)
    assert answer.get_response()["id"] == "r1"
    assert answer.get_response()["parameters"]["batch_size"] == 4
    client.close()


def test_tritonclient_reads_health_and_metadata(served: KServeServer) -> None:
    client = client_of(served)

    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("tiny") and not client.is_model_ready("other")
    metadata = client.get_model_metadata("tiny")
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 16]}]
    assert metadata["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [-1, 8]}]
    client.close()


def test_the_server_serves_with_the_heap_set_aside_until_it_stops(served: KServeServer) -> None:
    import gc

    assert gc.get_freeze_count() > 0  # collections walk only what serving allocated
    served.stop()
    assert gc.get_freeze_count() == 0
    served.stop()  # idempotent: the heap is not unfrozen twice
    assert gc.get_freeze_count() == 0


def test_concurrent_requests_leave_in_one_batch_each_with_its_own_rows(
    served: KServeServer, tiny_model: Path
) -> None:
    client = client_of(served, concurrency=4)
    requests = [rows(1, seed) for seed in range(4)]

    pending = [client.async_infer("tiny", request_of(x, binary=True)[0]) for x in requests]
    answers = [request.get_result(timeout=WAIT_S) for request in pending]
    client.close()
    served.stop()
    report = served.report()

    for x, answer in zip(requests, answers, strict=True):
        np.testing.assert_allclose(answer.as_numpy("y"), direct(tiny_model, x), atol=1e-6)
        assert answer.get_response()["parameters"]["batch_size"] == 4
    assert (report.requests, report.failed, report.mean_batch_size) == (4, 0, 4.0)
    assert report.p50_ms is not None and report.p50_ms <= report.p99_ms


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"inputs": [{"name": "z", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}]},
            "z",
        ),
        ({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.0]}]}, "16"),
        (
            {"inputs": [{"name": "x", "shape": [1, 16], "datatype": "BYTES", "data": ["a"]}]},
            "BYTES",
        ),
        (
            {
                "inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.0] * 16}],
                "outputs": [{"name": "w"}],
            },
            "no output 'w'",
        ),
    ],
    ids=["unknown-input", "wrong-count", "bytes", "unknown-output"],
)
def test_a_bad_request_is_a_400_naming_the_problem(
    served: KServeServer, body: dict, message: str
) -> None:
    request = urllib.request.Request(
        f"{served.url}/v2/models/tiny/infer", data=json.dumps(body).encode(), method="POST"
    )

    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=WAIT_S)

    assert caught.value.code == 400
    assert message in json.loads(caught.value.read())["error"]
    assert served.ledger.figures()["failed"] == 1


def test_an_unknown_model_is_a_404_naming_the_served_one(served: KServeServer) -> None:
    client = client_of(served)
    inputs, _ = request_of(rows(1), binary=False)

    with pytest.raises(InferenceServerException, match="serves 'tiny'"):
        client.infer("other", inputs)
    client.close()


# --- the command -----------------------------------------------------------------------------


def test_the_command_serves_until_interrupted_and_reports_the_load(
    tiny_model: Path, tmp_path: Path
) -> None:
    bundle = make_bundle(tiny_model, tmp_path, timeout_ms=1.0)
    command = [sys.executable, "-m", "optistudio.cli", "serve", str(bundle), "--port", "0"]
    env = os.environ | {"NNCF_CI": "1"}
    # started ignoring SIGINT, as a shell's `cmd &` without job control starts it (a CI
    # script's background run): Ctrl-C must stop it still, long before its --seconds
    process = subprocess.Popen(
        [*command, "--seconds", str(3 * WAIT_S), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    try:
        ready = _ready_line(process)
        url = ready.split(" at ", 1)[1].split(" ", 1)[0]  # http://127.0.0.1:PORT/v2/models/tiny
        x = rows(2, seed=5)
        body = {
            "inputs": [
                {"name": "x", "shape": [2, 16], "datatype": "FP32", "data": x.ravel().tolist()}
            ]
        }
        answer = json.loads(
            urllib.request.urlopen(
                urllib.request.Request(f"{url}/infer", data=json.dumps(body).encode()),
                timeout=WAIT_S,
            ).read()
        )
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=WAIT_S)
    finally:
        process.kill()

    assert url.startswith("http://127.0.0.1:") and "max batch 4" in ready
    output = answer["outputs"][0]
    assert (output["name"], output["shape"], output["datatype"]) == ("y", [2, 8], "FP32")
    np.testing.assert_allclose(
        np.asarray(output["data"], np.float32).reshape(2, 8), direct(tiny_model, x), atol=1e-6
    )
    assert process.returncode == 0, stderr
    report = json.loads(stdout)
    assert (report["requests"], report["failed"], report["mean_batch_size"]) == (1, 0, 2.0)
    assert report["settings"]["max_batch_size"] == 4


def _ready_line(process: subprocess.Popen) -> str:
    """The first stderr line that says where it serves (libraries may log before it)."""
    assert process.stderr is not None
    for line in process.stderr:
        if line.startswith("serving "):
            return line
    raise AssertionError(f"the server stopped before serving (exit {process.wait(WAIT_S)})")


def test_a_host_beyond_loopback_is_refused_without_allow_open(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.delenv("OPTISTUDIO_ALLOW_OPEN", raising=False)
    bundle = make_bundle(tiny_model, tmp_path)

    code = main(["serve", str(bundle), "--host", "0.0.0.0", "--json"])

    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2
    assert "Refusing to serve on 0.0.0.0" in error["message"]
    assert "--allow-open" in error["hint"]


def test_the_command_stops_after_seconds_and_prints_the_report(
    tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = make_bundle(tiny_model, tmp_path)

    code = main(["serve", str(bundle), "--port", "0", "--seconds", "0.5"])

    out = capsys.readouterr()
    assert code == 0
    assert out.out.startswith("served 0 request(s) of tiny in ")
    assert "serving tiny at http://127.0.0.1:" in out.err
