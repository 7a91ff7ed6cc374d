"""OpenVINO's usage telemetry: declined through its consent file, with no event sent on the way.

`ov.convert_model` sends events whenever the home folder holds no consent file (its checker
counts "no file" as consent when it asks no question) and the environment's CI is not "true",
each from a fresh process: `make install`, `optistudio up`, `optistudio worker` and the test
session write the file declined (optistudio/services/telemetry.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from optistudio.services import telemetry
from optistudio.services.telemetry import openvino_declined, opt_out_of_openvino

pytest.importorskip("openvino_telemetry")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home folder of its own, with no consent file yet (a fresh machine's)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def test_a_fresh_home_would_send_and_the_opt_out_declines(home: Path) -> None:
    assert not openvino_declined()  # what every process saw before `make install` wrote it

    consent = opt_out_of_openvino()

    assert consent == home / "intel" / "openvino_telemetry"
    assert consent.read_text() == "0"
    assert openvino_declined()


def test_the_opt_out_removes_the_client_id_and_counts_and_sends_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from openvino_telemetry.backend.backend_ga4 import GA4Backend

    sent: list[object] = []
    monkeypatch.setattr(GA4Backend, "send", lambda self, message: sent.append(message))
    kept = home / "intel"
    kept.mkdir()
    for name in ("openvino_ga_cid", "openvino_ga_uid", "stats"):
        (kept / name).write_text("kept by an earlier conversion")
    (kept / "openvino_telemetry").write_text("1")  # an earlier opt-in is overridden

    opt_out_of_openvino()
    opt_out_of_openvino()  # again: still declined, still silent

    assert sorted(p.name for p in kept.iterdir()) == ["openvino_telemetry"]
    assert openvino_declined() and sent == []


def test_a_conversion_after_the_opt_out_sends_no_event(home: Path) -> None:
    """The real thing, in a process of its own (OpenVINO's telemetry reads its consent once
    per process): ov.convert_model of an ONNX file, with the backend's send counted."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    path = home / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    script = textwrap.dedent(
        f"""
        from openvino_telemetry.backend.backend_ga4 import GA4Backend
        sent = []
        GA4Backend.send = lambda self, message: sent.append(message)
        from optistudio.services.telemetry import opt_out_of_openvino
        opt_out_of_openvino()
        import openvino as ov
        ov.convert_model({str(path)!r})
        print(len(sent))
        """
    )
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "CI": ""}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
    assert not (home / "intel" / "openvino_ga_cid").exists()


def test_the_worker_command_declines_before_it_starts(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optistudio.cli import worker

    started: list[list[str]] = []
    monkeypatch.setattr(worker.os, "execvpe", lambda file, args, env: started.append(args))

    worker.command_worker(argparse.Namespace())

    assert started and openvino_declined()


def test_without_openvino_nothing_is_written(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino_telemetry.utils.opt_in_checker", None)

    assert telemetry.opt_out_of_openvino() is None
    assert not (home / "intel").exists()
