"""The load check in a child process: ONNX Runtime's refusals read as in-process, and a child
that runs out of memory, is late or is killed is one sentence naming the limits, while this
process carries on."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import onnx
import psutil
import pytest
from hostile_models import sparse_weight_model
from onnx import TensorProto, helper

from optistudio.core.backends import load_child
from optistudio.core.backends.isolated_load import (
    MEMORY_ENV,
    MIN_MEMORY_BYTES,
    TIME_ENV,
    check_loads_isolated,
    memory_budget,
)
from optistudio.core.backends.loadable import check_loads
from optistudio.core.backends.reference import reference_session
from optistudio.core.errors import ModelRejected

MiB = 2**20


def refusal(path: Path, **limits: float | int | None) -> ModelRejected:
    with pytest.raises(ModelRejected) as caught:
        check_loads_isolated(path, **limits)  # type: ignore[arg-type]
    return caught.value


def test_a_loadable_model_passes(tiny_model: Path) -> None:
    check_loads_isolated(tiny_model)


def test_a_refusal_reads_as_the_in_process_checks(tmp_path: Path) -> None:
    custom = helper.make_graph(
        [helper.make_node("Mystery", ["x"], ["y"], domain="com.example")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    path = tmp_path / "custom.onnx"
    onnx.save(helper.make_model(custom, opset_imports=opsets, ir_version=8), path)
    with pytest.raises(ModelRejected) as in_process:
        check_loads(path)

    isolated = refusal(path)

    assert (isolated.message, isolated.hint) == (in_process.value.message, in_process.value.hint)
    assert "Mystery" in isolated.message and str(tmp_path) not in isolated.message


def test_a_load_over_the_memory_limit_is_one_sentence_and_this_process_carries_on(
    tmp_path: Path,
) -> None:
    path = sparse_weight_model(tmp_path / "m", 768 * MiB)

    error = refusal(path, memory_bytes=512 * MiB)

    assert error.message == (
        "ONNX Runtime could not load the model within 120 s and 512 MB: it ran out of memory."
    )
    assert MEMORY_ENV in (error.hint or "") and TIME_ENV in (error.hint or "")
    check_loads_isolated(path, memory_bytes=3 * 1024 * MiB)  # the same file, room to map it


def test_a_load_past_the_time_limit_is_one_sentence(tiny_model: Path) -> None:
    started = time.monotonic()

    error = refusal(tiny_model, seconds=0.001, memory_bytes=1024 * MiB)

    assert error.message == (
        "ONNX Runtime could not load the model within 0.001 s and 1,024 MB: "
        "it took longer than that."
    )
    assert time.monotonic() - started < 30
    assert not _load_children()  # killed and reaped


def test_a_child_killed_from_outside_is_one_sentence(tiny_model: Path) -> None:
    killer = threading.Thread(target=_kill_first_load_child, daemon=True)
    killer.start()

    error = refusal(tiny_model)

    killer.join(timeout=30)
    assert error.message.endswith("its process was stopped by SIGKILL."), error.message


def test_the_childs_session_is_the_reference_sessions(tiny_model: Path) -> None:
    import onnxruntime as ort

    reference = reference_session(tiny_model, threads=1, spin_wait=False, quiet=True)
    wanted = reference.get_session_options()
    child = load_child.session_options(ort)
    fields = ("graph_optimization_level", "intra_op_num_threads", "log_severity_level")
    assert [getattr(child, f) for f in fields] == [getattr(wanted, f) for f in fields]
    spinning = "session.intra_op.allow_spinning"
    assert child.get_session_config_entry(spinning) == wanted.get_session_config_entry(spinning)


def test_the_memory_budget_is_four_times_the_model_at_least_4_gib(
    tmp_path: Path, tiny_model: Path
) -> None:
    machine = psutil.virtual_memory().total
    big = sparse_weight_model(tmp_path / "big", 1536 * MiB)

    assert memory_budget(tiny_model) == min(MIN_MEMORY_BYTES, machine)
    wanted = min(4 * (1536 * MiB + big.stat().st_size), machine)
    assert memory_budget(big) == wanted
    assert memory_budget(big, max_model_bytes=2048 * MiB) == wanted  # a limit that allows it
    # Under an upload limit whose 4x is below 4 GiB, the budget is 4 GiB without reading.
    assert memory_budget(big, max_model_bytes=512 * MiB) == min(MIN_MEMORY_BYTES, machine)


def _load_children() -> list[psutil.Process]:
    children = psutil.Process().children()
    return [c for c in children if _is_load_child(c)]


def _is_load_child(process: psutil.Process) -> bool:
    try:
        return load_child.ANSWER in " ".join(process.cmdline())
    except psutil.Error:
        return False


def _kill_first_load_child() -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for child in _load_children():
            os.kill(child.pid, signal.SIGKILL)
            return
        time.sleep(0.005)
