"""Quantization-aware training: the pass, its training loop, its refusals and Auto's rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from optistudio.core.errors import BackendUnavailable, Cancelled, PassFailed
from optistudio.core.passes import qat
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.qat import QatConfig, auto_offer, run_qat
from optistudio.core.passes.qat_history import history_line, read_history
from optistudio.core.torch_bridge import UnsupportedOps
from tests.core.torch_bridge.bridge_models import tiny_cnn, with_ops

needs_torch = pytest.mark.extras
SAMPLES = 160


def _torch() -> None:
    pytest.importorskip("torch", reason="needs the qat extra: pip install 'optistudio[qat]'")


@pytest.fixture
def cnn_data(tmp_path: Path) -> tuple[Path, Path, Path]:
    """tiny_cnn, random inputs and random (learnable by memorising) class ids."""
    model = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), model)
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "x.npz", x=rng.standard_normal((SAMPLES, 1, 8, 8)).astype(np.float32))
    np.save(tmp_path / "y.npy", rng.integers(0, 10, SAMPLES))
    return model, tmp_path / "x.npz", tmp_path / "y.npy"


def _context(tmp_path: Path, messages: list[str] | None = None) -> PassContext:
    def progress(fraction: float, message: str) -> None:
        if messages is not None:
            messages.append(message)

    return PassContext(work_dir=tmp_path / "work", progress=progress)


def _run(path: Path) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(9).standard_normal((4, 1, 8, 8)).astype(np.float32)
    return session.run(None, {"x": x})[0]


@needs_torch
def test_training_with_labels_lowers_the_loss_and_exports_qdq(tmp_path: Path, cnn_data) -> None:  # type: ignore[no-untyped-def]
    _torch()
    model, x, y = cnn_data
    config = QatConfig(
        train_path=str(x), train_labels_path=str(y), epochs=4, patience=4, learning_rate=1e-2
    )
    messages: list[str] = []

    report = run_qat(model, tmp_path / "qat.onnx", config, _context(tmp_path, messages))

    losses = report.details["history"]["train_loss"]
    ops = {node.op_type for node in onnx.load(report.output).graph.node}
    assert report.details["training"]["loss"] == "cross_entropy"
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert report.details["fake_quantized"]["weights"] == 4
    assert report.details["device"] in ("cpu", "cuda")  # auto: the GPU when torch sees one
    assert _run(report.output).shape == (4, 10)
    assert read_history(messages[-3]) is not None  # the last epoch's line, before quantizing


@needs_torch
def test_distillation_without_labels_keeps_the_fp32_outputs(tmp_path: Path, cnn_data) -> None:  # type: ignore[no-untyped-def]
    _torch()
    model, x, _ = cnn_data
    config = QatConfig(train_path=str(x), epochs=2)

    report = run_qat(model, tmp_path / "qat.onnx", config, _context(tmp_path))

    validation = report.details["validation"]
    fp32, int8 = _run(model), _run(report.output)
    cosine = (fp32 * int8).sum() / np.linalg.norm(fp32) / np.linalg.norm(int8)
    assert report.details["training"]["loss"] == "distillation"
    assert validation["int8_after_training"] <= validation["int8_before_training"]
    assert cosine > 0.99


@needs_torch
def test_cancel_stops_between_steps(tmp_path: Path, cnn_data) -> None:  # type: ignore[no-untyped-def]
    _torch()
    model, x, y = cnn_data
    steps: list[str] = []

    def progress(fraction: float, message: str) -> None:
        if message.startswith("step"):
            steps.append(message)
            if len(steps) == 3:
                raise Cancelled("Cancelled while running.")

    context = PassContext(work_dir=tmp_path / "work", progress=progress)
    config = QatConfig(train_path=str(x), train_labels_path=str(y), epochs=5)

    with pytest.raises(Cancelled):
        run_qat(model, tmp_path / "qat.onnx", config, context)
    assert len(steps) == 3
    assert not (tmp_path / "qat.onnx").exists()


@needs_torch
def test_time_limit_keeps_the_best_epoch(tmp_path: Path, cnn_data) -> None:  # type: ignore[no-untyped-def]
    _torch()
    model, x, y = cnn_data
    config = QatConfig(train_path=str(x), train_labels_path=str(y), epochs=50, max_minutes=1e-4)

    report = run_qat(model, tmp_path / "qat.onnx", config, _context(tmp_path))

    assert report.details["stopped_by"] == "time limit"
    assert report.details["epochs_run"] <= 1
    assert report.output.exists()


def test_unsupported_ops_are_refused_by_name_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "lstm.onnx"
    onnx.save(with_ops("Relu", "NonZero", "Det"), model)
    monkeypatch.setattr(qat, "torch_available", lambda: True)
    config = QatConfig(train_path=str(tmp_path / "never-read.npz"))

    with pytest.raises(UnsupportedOps) as caught:
        run_qat(model, tmp_path / "out.onnx", config, _context(tmp_path))

    assert caught.value.ops == ["Det", "NonZero"]
    assert "Det, NonZero" in caught.value.message


def test_missing_torch_is_one_sentence_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), model)
    monkeypatch.setattr(qat, "torch_available", lambda: False)

    with pytest.raises(BackendUnavailable) as caught:
        run_qat(model, tmp_path / "out.onnx", QatConfig(train_path="x.npz"), _context(tmp_path))

    assert "pip install 'optistudio[qat]'" in caught.value.message
    assert caught.value.message.count(". ") == 0 and caught.value.hint is None


def test_no_training_data_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "cnn.onnx"
    onnx.save(tiny_cnn(), model)
    monkeypatch.setattr(qat, "torch_available", lambda: True)

    with pytest.raises(PassFailed, match="needs training data"):
        run_qat(model, tmp_path / "out.onnx", QatConfig(), _context(tmp_path))


@pytest.mark.parametrize(
    ("auto", "ptq", "given", "torch_here", "offered", "note"),
    [
        (True, [False, False], True, True, True, "so Auto added quantization-aware training"),
        (True, [False, False], False, True, False, "give training data (--train"),
        (True, [False], True, False, False, "pip install 'optistudio[qat]'"),
        (True, [False, True], True, True, False, None),
        (True, [], True, True, False, None),
        (False, [False], True, True, False, None),
    ],
    ids=["all-missed", "no-data", "no-torch", "one-within", "no-ptq", "not-auto"],
)
def test_auto_offers_qat_only_when_every_ptq_variant_missed(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, auto, ptq, given, torch_here, offered, note
) -> None:
    monkeypatch.setattr(qat, "torch_available", lambda: torch_here)

    added, said = auto_offer(auto=auto, ptq_within_budget=ptq, training_given=given)

    assert added is offered
    assert (said is None) if note is None else (note in (said or ""))


@pytest.mark.parametrize(
    ("ptq", "offered", "note"),
    [
        ([], False, "Every post-training INT8 candidate failed outright, so none was judged"),
        ([False], True, "that was measured missed the accuracy budget, the others failed"),
        ([True], False, None),
    ],
    ids=["all-failed", "one-missed-one-failed", "one-within-one-failed"],
)
def test_a_ptq_variant_that_failed_outright_is_never_counted_as_a_miss(  # type: ignore[no-untyped-def]
    monkeypatch: pytest.MonkeyPatch, ptq, offered, note
) -> None:
    monkeypatch.setattr(qat, "torch_available", lambda: True)
    failures = ["INT8 NNCF: NNCF could not quantize it"]

    added, said = auto_offer(
        auto=True, ptq_within_budget=ptq, training_given=True, ptq_failed=failures
    )

    assert added is offered
    if note is None:
        assert said is None
    else:
        assert note in (said or "") and "INT8 NNCF: NNCF could not quantize it" in (said or "")


def test_history_line_reads_back() -> None:
    line = "step 3/9 of " + history_line(2, 6, [0.5, 0.25], "top-1", [0.8, 0.9, 0.95])

    found = read_history(line)

    assert found is not None
    assert found["val top-1"] == [0.8, 0.9, 0.95]
    assert np.isnan(found["train loss"][0]) and found["train loss"][1:] == [0.5, 0.25]
    assert read_history("calibrating 40%") is None


@needs_torch
def test_cli_optimize_with_qat_prints_one_json_document(tmp_path: Path, cnn_data) -> None:  # type: ignore[no-untyped-def]
    _torch()
    model, x, y = cnn_data
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(tmp_path / "data"))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    command = [sys.executable, "-m", "optistudio.cli", "optimize", str(model), "--recipe", "qat"]
    command += ["--train", str(x), "--train-labels", str(y), "--calib", str(x), "--labels", str(y)]
    command += ["--epochs", "1", "--seconds", "0.2", "--out", str(tmp_path / "out"), "--json"]

    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=280)

    assert done.returncode == 0, done.stderr[-2000:]
    (variant,) = json.loads(done.stdout)["variants"]
    qat_step = variant["steps"][-1]
    assert variant["status"] == "made" and variant["precision"] == "int8"
    assert qat_step["step"] == "qat" and qat_step["details"]["epochs_run"] == 1
    assert variant["accuracy"]["top1_accuracy_candidate"] is not None
    assert variant["speedup"] is not None


def test_cli_flags_become_the_qat_settings(tmp_path: Path) -> None:
    from optistudio.cli import build_parser
    from optistudio.cli.optimize import optimize_spec

    args = build_parser().parse_args(
        ["optimize", "m.onnx", "--recipe", "qat", "--train", "x.npz", "--epochs", "3"]
        + ["--out", str(tmp_path)]
    )

    settings = optimize_spec(args).pass_settings["qat"]

    assert settings == {"train_path": str(Path("x.npz").resolve()), "epochs": 3}


def _auto_run(tmp_path: Path, cnn_data, qat_settings: dict):  # type: ignore[no-untyped-def]
    from optistudio.core.data.datasets import NpzDataset
    from optistudio.core.measure.compare import ComparisonSpec
    from optistudio.core.model.intake import inspect_model
    from optistudio.core.optimize.run import OptimizeSpec, optimize

    model, x, _ = cnn_data
    spec = OptimizeSpec(
        recipes=["auto"],
        target_backend="onnxruntime",
        task="none",
        budget={"min_cosine": 0.999999},  # no INT8 variant keeps that
        # INT8 only where it pays could keep so few nodes INT8 that its cosine stays in budget,
        # depending on this machine's per-node timings: a margin no node clears keeps it out
        pass_settings={"int8_placed": {"margin": 0.999}}
        | ({"qat": qat_settings} if qat_settings else {}),
        comparison=ComparisonSpec(min_pairs=5, min_seconds=0.05, max_seconds=0.5),
    )
    data = NpzDataset(x, inspect_model(model).inputs, batch_size=32)
    return optimize(model, spec, out_dir=tmp_path / "run", data=data)


def test_auto_says_what_qat_needs_when_every_ptq_variant_misses(tmp_path: Path, cnn_data) -> None:  # type: ignore[no-untyped-def]
    report = _auto_run(tmp_path, cnn_data, {})

    names = [v.recipe.name for v in report.variants]
    assert "int8_static" in names and "qat" not in names
    assert any("give training data (--train" in note for note in report.notes)


@needs_torch
def test_auto_adds_qat_when_every_ptq_variant_misses(tmp_path: Path, cnn_data) -> None:  # type: ignore[no-untyped-def]
    _torch()
    _, x, y = cnn_data

    report = _auto_run(tmp_path, cnn_data, {"train_path": str(x), "epochs": 1})

    (qat_variant,) = [v for v in report.variants if v.recipe.name == "qat"]
    assert qat_variant.status == "made" and qat_variant.accuracy is not None
    assert any("Auto added quantization-aware training" in note for note in report.notes)


@needs_torch
def test_asking_for_a_gpu_torch_cannot_see_is_refused_before_training(
    tmp_path: Path, cnn_data
) -> None:  # type: ignore[no-untyped-def]
    _torch()
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine's torch sees a GPU")
    model, x, y = cnn_data
    config = QatConfig(train_path=str(x), train_labels_path=str(y), epochs=1, device="cuda")

    with pytest.raises(PassFailed, match="sees none") as refused:
        run_qat(model, tmp_path / "qat.onnx", config, _context(tmp_path))
    assert "auto" in (refused.value.hint or "")


@needs_torch
def test_qat_for_an_openvino_target_runs_there_and_exports_to_ir(tmp_path: Path, cnn_data) -> None:  # type: ignore[no-untyped-def]
    _torch()
    pytest.importorskip("openvino")
    from optistudio.core.data.datasets import NpzDataset
    from optistudio.core.measure.compare import ComparisonSpec
    from optistudio.core.model.intake import inspect_model
    from optistudio.core.optimize.run import OptimizeSpec, optimize
    from optistudio.core.report.bundle import BundleSource, write_bundle

    model, x, y = cnn_data
    spec = OptimizeSpec(
        recipes=["qat"],
        target_backend="openvino",
        task="none",
        pass_settings={"qat": {"train_path": str(x), "train_labels_path": str(y), "epochs": 1}},
        comparison=ComparisonSpec(min_pairs=5, min_seconds=0.05, max_seconds=0.5),
    )
    info = inspect_model(model)
    data = NpzDataset(x, info.inputs, batch_size=32)

    report = optimize(model, spec, out_dir=tmp_path / "run", data=data, labels_file=y)

    (variant,) = report.variants
    assert variant.status == "made" and variant.backend == "openvino"
    assert variant.speedup is not None  # timed on OpenVINO against the original there
    made = Path(variant.path)
    bundle = write_bundle(
        BundleSource(
            name="cnn_qat",
            model_path=made,
            info=inspect_model(made),
            precision="int8",
            coreml_precisions=[],
        ),
        tmp_path / "bundle.zip",
    )
    assert "openvino/cnn_qat.xml" in bundle.files and "openvino" not in bundle.skipped
    import zipfile

    with zipfile.ZipFile(bundle.path) as z:
        ir = z.read("openvino/cnn_qat.xml").decode()
    assert "FakeQuantize" in ir or "FakeConvert" in ir  # OpenVINO read the Q/DQ pairs as INT8
