"""Shared fixtures: tiny models built in code, isolated settings and a migrated database."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

os.environ.setdefault("STREAMLIT_BROWSER_GATHER_USAGE_STATS", "false")
os.environ.setdefault("NNCF_CI", "1")


TIMING_MARKER = (
    "timing: reads clocks or depends on the machine's speed; make test-stress runs these pinned "
    "to one core and beside a busy process (docs/DEVELOPMENT.md)"
)


def pytest_configure(config: pytest.Config) -> None:
    # Here, not in pyproject.toml: that file is one of the compose check's deployment files.
    config.addinivalue_line("markers", TIMING_MARKER)
    # No test sends OpenVINO's usage events, also where pytest runs without `make install`.
    from optistudio.services.telemetry import opt_out_of_openvino

    opt_out_of_openvino()


@pytest.fixture(autouse=True)
def _prepare_graphs_anew() -> None:
    """Each test prepares (and simplifies) its graphs itself (a test that makes the
    pre-processing fail must not be handed another test's prepared copy of the same bytes)."""
    from optistudio.core.passes.prepared_cache import PREPARED, SIMPLIFIED

    PREPARED.clear()
    SIMPLIFIED.clear()


@pytest.fixture(autouse=True)
def _keep_main_module() -> Iterator[None]:
    """Streamlit's AppTest replaces sys.modules['__main__'] and never puts it back; a later test
    that starts spawn-based processes then fails in the child. Restore it after every test."""
    main = sys.modules.get("__main__")
    yield
    if main is not None and sys.modules.get("__main__") is not main:
        sys.modules["__main__"] = main


def build_matmul_model(path: Path, *, batch: int | str = "batch", features: int = 16) -> Path:
    """y = relu(x @ W + b) with a dynamic (or fixed) batch dim; deterministic weights."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((features, 8)).astype(np.float32), "W")
    bias = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Add", ["h", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["y"]),
        ],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, features])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        initializer=[weight, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    return build_matmul_model(tmp_path / "tiny.onnx")


@pytest.fixture
def make_model(tmp_path: Path) -> Callable[..., Path]:
    def make(name: str = "m.onnx", **kwargs: object) -> Path:
        return build_matmul_model(tmp_path / name, **kwargs)  # type: ignore[arg-type]

    return make


@pytest.fixture
def app_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Settings pointing at a fresh data folder; the cached settings are reset around the test."""
    from optistudio.services.settings import get_settings

    monkeypatch.setenv("OPTISTUDIO_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("OPTISTUDIO_DATABASE_URL", raising=False)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


@pytest.fixture
def db_factory(app_settings: object) -> object:
    """A session factory on a database migrated to head."""
    from optistudio.db.session import make_session_factory
    from optistudio.services.migrate import upgrade

    upgrade(app_settings.database_url, lock_dir=app_settings.data_dir)  # type: ignore[attr-defined]
    return make_session_factory(app_settings.database_url)  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[object]:
    """A throw-away PostgreSQL server (tests/pgserver.py); skipped locally if not installed,
    a failure in CI."""
    from pgserver import remove_server, start_server

    from optistudio.cli.launcher import free_port

    server = start_server(free_port())
    yield server
    remove_server(server)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database of each kind: SQLite in tmp_path, or a fresh PostgreSQL database."""
    from pgserver import empty_database

    with empty_database(request, tmp_path) as url:
        yield url


def image_classifier(path: Path) -> Path:
    """probs = softmax(gemm(gap(relu(conv(image))))): image [batch, 3, 16, 16] -> [batch, 5], an
    input the built-in photographs fit."""
    rng = np.random.default_rng(0)
    weights = {
        "w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3,
        "fc": rng.standard_normal((5, 8)).astype(np.float32),
        "fc_b": np.zeros(5, np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["image", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "fc", "fc_b"], ["logits"], transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "classifier",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 5])],
        initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def unloadable(path: Path) -> Path:
    """A QDQ-looking file ONNX Runtime refuses: DequantizeLinear of a float tensor (its input
    must be an integer type), as a broken INT8 pass could write it."""
    weight = numpy_helper.from_array(np.ones((4,), np.float32), "w")
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    graph = helper.make_graph(
        [
            helper.make_node("DequantizeLinear", ["w", "s"], ["wd"]),
            helper.make_node("Add", ["x", "wd"], ["y"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        initializer=[weight, scale],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


SPIN = "while True: pass"


@contextmanager
def every_core_busy() -> Iterator[None]:
    """One spinning process per core this process may use: a run beside them shares the CPU
    with other processes."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in os.sched_getaffinity(0)]
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait(timeout=10)
