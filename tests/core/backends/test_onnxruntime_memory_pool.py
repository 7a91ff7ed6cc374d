"""memory_pool_ratio on ONNX Runtime: the CPU arena it caps (real sessions, inspected and run)
and the CUDA / TensorRT provider options it computes (GPU mocked at nvidia_gpus)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import psutil
import pytest
from pydantic import ValidationError

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends import onnxruntime_backend as ort_backend
from optistudio.core.errors import InferenceFailed
from optistudio.core.machine import gpus
from optistudio.core.machine.gpus import Gpu

GIB = 2**30


def feeds(rows: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(rows).standard_normal((rows, 16)).astype(np.float32)}


class SessionSpy:
    """Records the session options and arena configs ONNX Runtime is given, then calls it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.session_options: list[Any] = []
        self.arenas: list[Any] = []
        real_session, real_register = ort.InferenceSession, ort.create_and_register_allocator

        def session(path: str, sess_options: Any = None, **kwargs: Any) -> Any:
            self.session_options.append(sess_options)
            return real_session(path, sess_options, **kwargs)

        def register(memory_info: Any, arena: Any) -> None:
            self.arenas.append(arena)
            real_register(memory_info, arena)

        monkeypatch.setattr(ort, "InferenceSession", session)
        monkeypatch.setattr(ort, "create_and_register_allocator", register)


def test_the_ratio_reaches_the_cpu_session_as_a_capped_arena(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = SessionSpy(monkeypatch)

    model = get_backend("onnxruntime").load(tiny_model, SessionOptions(memory_pool_ratio=0.25))

    (arena,) = spy.arenas
    assert arena.max_mem == int(psutil.virtual_memory().total * 0.25)
    assert arena.arena_extend_strategy == ort_backend.SAME_AS_REQUESTED
    config = spy.session_options[0]
    assert config.get_session_config_entry("session.use_env_allocators") == "1"
    assert config.enable_cpu_mem_arena
    assert model.details["memory_pool"].startswith("CPU arena capped at")
    assert "memory_pool_ratio=0.25" in model.details["memory_pool"]


def test_without_a_ratio_the_session_keeps_the_default_arena(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = SessionSpy(monkeypatch)

    model = get_backend("onnxruntime").load(tiny_model, SessionOptions())

    assert spy.arenas == []
    with pytest.raises(RuntimeError, match="does not have configuration"):
        spy.session_options[0].get_session_config_entry("session.use_env_allocators")
    assert model.details["memory_pool"] == "arena on (ONNX Runtime's default)"


def test_a_run_that_needs_more_than_the_cap_fails_and_a_small_one_runs(tiny_model: Path) -> None:
    ratio = 16 * 1024 / psutil.virtual_memory().total  # a 16 KiB arena
    backend = get_backend("onnxruntime")
    capped = backend.load(tiny_model, SessionOptions(memory_pool_ratio=ratio))
    plain = backend.load(tiny_model, SessionOptions())

    np.testing.assert_array_equal(capped.run(feeds(1))[0], plain.run(feeds(1))[0])
    with pytest.raises(InferenceFailed, match="Available memory"):
        capped.run(feeds(1024))  # 32 KiB of output alone
    assert plain.run(feeds(1024))[0].shape == (1024, 8)


def test_each_session_keeps_its_own_cap(tiny_model: Path) -> None:
    total = psutil.virtual_memory().total
    backend = get_backend("onnxruntime")
    small = backend.load(tiny_model, SessionOptions(memory_pool_ratio=16 * 1024 / total))
    large = backend.load(tiny_model, SessionOptions(memory_pool_ratio=0.5))

    assert large.run(feeds(1024))[0].shape == (1024, 8)
    with pytest.raises(InferenceFailed):
        small.run(feeds(1024))


@pytest.mark.parametrize("ratio", [0, -0.5, 1.01], ids=["zero", "negative", "above-one"])
def test_a_ratio_outside_zero_to_one_is_refused(ratio: float) -> None:
    with pytest.raises(ValidationError, match="memory_pool_ratio"):
        SessionOptions(memory_pool_ratio=ratio)


# --- CUDA and TensorRT providers, GPU mocked at its one boundary ------------------------------


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> Gpu:
    gpu = Gpu(index=0, name="Fake GPU", memory_mib=8 * 1024, driver="0.0")
    monkeypatch.setattr(gpus, "nvidia_gpus", lambda: (gpu,))
    return gpu


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("provider", "option"),
    [("cuda", "gpu_mem_limit"), ("tensorrt", "trt_max_workspace_size")],
    ids=["cuda-arena", "tensorrt-workspace"],
)
def test_the_ratio_caps_the_gpu_pool_of_the_provider(
    fake_gpu: Gpu, provider: str, option: str
) -> None:
    options = SessionOptions(device="cuda:0", memory_pool_ratio=0.25)

    (name, settings), fallback = ort_backend._providers(provider, 0, options)

    assert name == ort_backend.PROVIDER_NAMES[provider]
    assert settings[option] == 2 * GIB
    assert fallback == "CPUExecutionProvider"
    note = ort_backend._memory_pool_note(options, provider, 0, None)
    assert "2048 MiB" in note and "memory_pool_ratio=0.25" in note


@pytest.mark.gpu
def test_the_cuda_arena_grows_as_requested_and_is_uncapped_without_a_ratio(fake_gpu: Gpu) -> None:
    (_, settings), _ = ort_backend._providers("cuda", 0, SessionOptions(device="cuda:0"))

    assert settings["arena_extend_strategy"] == "kSameAsRequested"
    assert "gpu_mem_limit" not in settings
    assert ort_backend.cpu_arena_config(SessionOptions(memory_pool_ratio=0.5), "cuda") is None


@pytest.mark.gpu
def test_a_gpu_whose_memory_is_unknown_says_the_ratio_was_not_applied(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gpu = Gpu(index=0, name="Fake GPU", memory_mib=0, driver="0.0")
    monkeypatch.setattr(gpus, "nvidia_gpus", lambda: (gpu,))
    options = SessionOptions(device="cuda:0", memory_pool_ratio=0.5)

    (_, settings), _ = ort_backend._providers("cuda", 0, options)

    assert "gpu_mem_limit" not in settings
    note = ort_backend._memory_pool_note(options, "cuda", 0, None)
    assert note.startswith("memory_pool_ratio=0.5 not applied")
