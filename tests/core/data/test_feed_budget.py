"""Synthesised inputs are made in their own dtype and budgeted before they are made (issue 39,
case 8): a float32 input never passes through a float64 copy, a shape the machine cannot hold
is one sentence instead of numpy's MemoryError, and so is an allocation a process under a
memory limit cannot make."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from cli_runner import run_in_process

from optistudio.core.data.inputs import synthesize_inputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.declared_sizes import MAX_TENSOR_MB_ENV
from optistudio.core.model.info import TensorSpec
from tests.conftest import build_matmul_model

FEED_BYTES = 32 * 1024**2
HEADROOM = 5 * 1024**2
"""What making a feed may allocate beyond the feed: float16's float32 chunks (4 MiB)."""


@pytest.mark.parametrize(
    ("dtype", "name"),
    [
        ("float32", "x"),
        ("float16", "x"),
        ("float64", "x"),
        ("int64", "ids"),
        ("int32", "ids"),
        ("bool", "flags"),
        ("uint8", "pixels"),
        ("int64", "attention_mask"),
    ],
    ids=["float32", "float16", "float64", "int64", "int32", "bool", "uint8", "int64-mask"],
)
def test_an_input_is_made_in_its_own_dtype_without_a_wider_copy(dtype: str, name: str) -> None:
    count = FEED_BYTES // np.dtype(dtype).itemsize
    spec = TensorSpec(name=name, dtype=dtype, shape=["batch", count])

    tracemalloc.start()
    try:
        feeds, _ = synthesize_inputs([spec], batch_size=1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    feed = feeds[name]
    assert feed.dtype == np.dtype(dtype) and feed.shape == (1, count)
    assert peak < FEED_BYTES + HEADROOM, f"{peak / 1024**2:.0f} MiB for a 32 MiB input"
    if dtype.startswith("float"):
        assert abs(float(feed[0, :4096].astype(np.float64).std()) - 1.0) < 0.1


def test_the_same_seed_gives_the_same_values() -> None:
    specs = [TensorSpec(name="x", dtype="float16", shape=["batch", 3_000_000])]
    first = synthesize_inputs(specs, batch_size=1, seed=3)[0]["x"]
    again = synthesize_inputs(specs, batch_size=1, seed=3)[0]["x"]
    assert np.array_equal(first, again) and not np.array_equal(first[0, :1000], first[0, 1000:2000])


def test_a_shape_over_the_machines_memory_is_a_sentence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_TENSOR_MB_ENV, raising=False)
    specs = [TensorSpec(name="x", dtype="float32", shape=["batch", 16])]

    with pytest.raises(InvalidSpec) as refused:  # 4 TiB: over half of any machine's memory
        synthesize_inputs(specs, batch_size=1, overrides={"x": [1 << 36, 16]})

    assert refused.value.message.startswith(
        "The inputs to generate need 4,096.00 GiB ('x' [68719476736x16] float32), over the "
    )
    assert "--shape" in (refused.value.hint or "")


def test_inputs_are_budgeted_together(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MAX_TENSOR_MB_ENV, "1")
    specs = [TensorSpec(name=n, dtype="float32", shape=["batch", 160_000]) for n in "ab"]

    synthesize_inputs(specs[:1], batch_size=1)  # 0.6 MiB alone
    with pytest.raises(InvalidSpec, match=r"need 1.2 MiB .* over the 1.0 MiB budget"):
        synthesize_inputs(specs, batch_size=1)


def test_bench_with_a_shape_the_machine_cannot_hold_says_so(tmp_path: Path) -> None:
    model = build_matmul_model(tmp_path / "tiny.onnx")

    done = run_in_process(
        ["bench", str(model), "--shape", f"x={1 << 36},16", "--threads", "1"],
        set_env={"OPTISTUDIO_DATA_DIR": str(tmp_path / "data")},
        unset_env=("OPTISTUDIO_DATABASE_URL", MAX_TENSOR_MB_ENV),
    )

    assert done.returncode != 0
    assert "The inputs to generate need 4,096.00 GiB" in done.stderr
    assert "Traceback" not in done.stderr and "MemoryError" not in done.stderr


CHILD = textwrap.dedent(
    """
    import resource, sys
    from optistudio.core.data.inputs import synthesize_inputs
    from optistudio.core.errors import InvalidSpec
    from optistudio.core.model.info import TensorSpec
    with open("/proc/self/status") as status:
        used = next(int(l.split()[1]) for l in status if l.startswith("VmSize")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (used + 512 * 1024**2, resource.RLIM_INFINITY))
    spec = TensorSpec(name="x", dtype="float32", shape=["batch", 1 << 29])  # 2 GiB
    try:
        synthesize_inputs([spec], batch_size=1)
    except InvalidSpec as exc:
        print(exc.message)
        sys.exit(3)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc: Linux")
def test_an_allocation_a_memory_limit_refuses_is_a_sentence() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        timeout=120,
        env={"OPTISTUDIO_MAX_TENSOR_MB": "1000000", "NNCF_CI": "1", "PATH": "/usr/bin:/bin"},
    )

    assert done.returncode == 3, done.stderr[-2000:]
    assert done.stdout.strip() == (
        "Input 'x' at shape [1x536870912] float32 needs 2.00 GiB, more memory than this "
        "process could allocate."
    )
