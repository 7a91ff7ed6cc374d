"""NNCF's own quantization-aware training on a trained PyTorch module: the anchor for bench/qat.py.

The flow is the one NNCF 3.4 documents for PyTorch (docs/usage/training_time_compression/
quantization_aware_training/Usage.md and examples/quantization_aware_training/torch/resnet18/
main.py in openvinotoolkit/nncf):

  1. quantized = nncf.quantize(module, nncf.Dataset(training inputs))   (post-training INT8:
     an nn.Module goes to NNCF's function-hook backend, nncf/torch/function_hook; NNCF 3.x has
     no create_compressed_model / NNCFNetwork any more)
  2. train `quantized` as usual (here Adam + cross-entropy; fake quantizers carry gradients)
  3. ov.convert_model(quantized, example_input=...) -> OpenVINO IR, whose FakeQuantize nodes
     the CPU plugin runs as INT8 layers.

Besides the IR, the QAT model is exported to ONNX with Quantize/DequantizeLinear pairs. NNCF 3.4
documents no ONNX path: the quantizers' export mode (QuantizerExportMode) defaults to an
OpenVINO-domain FakeQuantize node that ONNX Runtime cannot load, so each quantizer is switched
to ONNX_QUANTIZE_DEQUANTIZE_PAIRS and the classic TorchScript exporter is used (dynamo=False);
torch 2.13's dynamo exporter fails on NNCF's quantizers (torch.export raises
GuardOnDataDependentSymNode). nncf.strip(), the documented clean-up, imports torchao, which the
qat extra does not install, so it is not used.

Two surprises worth knowing:
- NNCF stores its hooks as a submodule of the model it quantizes. On an nn.Sequential that
  submodule becomes one more layer and forward fails ("HookStorage is missing the required
  forward function"), so the module is wrapped in a one-field container first.
- NNCF compiles a C++ extension for its CPU fake quantizers on first use (about 2 minutes on a
  2-core machine, cached under ~/.cache/torch_extensions). Its default 60 s timeout fails there
  and leaves a lock file that hangs the next run; the timeout is lifted unless the caller set one.
"""

from __future__ import annotations

import copy
import logging
import os
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

HELD_OUT = 0.15
PATIENCE = 2
"""Epochs without a better held-out score before training stops."""
CALIBRATION_SAMPLES = 300
"""NNCF's default subset_size: single images, as its QAT example calibrates."""


def nncf_qat_anchor(
    module: Any,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    *,
    epochs: int = 8,
    lr: float = 1e-4,
    batch: int = 32,
    seconds: float = 1.5,
    folder: Path,
    threads: int | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """NNCF PTQ and NNCF QAT of a trained FP32 `module`, deployed on OpenVINO CPU and measured.

    The module is not changed (it is copied). Training uses x_train/y_train only: 15 % of it is
    held out (stratified) for early stopping, and the best epoch by held-out top-1 (then loss)
    is kept, the quantized start counting as epoch 0. Top-1 is read on x_test from the
    OpenVINO IRs (what would be deployed) and from torch. Speed: interleaved pairs of the FP32
    IR against each INT8 IR on OpenVINO CPU (optistudio.core.measure.compare.compare_loaded),
    batch `batch`, at least `seconds` per comparison. Returns the figures and written paths.
    """
    os.environ.setdefault("NNCF_EXTENSION_LOAD_TIMEOUT", "0")
    import nncf
    import openvino as ov
    import torch

    torch.set_num_threads(1)
    nncf.set_log_level(logging.ERROR)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []
    x_fit, y_fit, x_val, y_val = _hold_out(x_train, y_train, seed)
    fp32 = _wrap(copy.deepcopy(module)).eval()

    t0 = time.perf_counter()
    calibration = nncf.Dataset([torch.from_numpy(x_fit[i : i + 1]) for i in range(len(x_fit))])
    ptq = nncf.quantize(fp32, calibration, subset_size=CALIBRATION_SAMPLES)
    calibration_seconds = time.perf_counter() - t0
    qat = copy.deepcopy(ptq)
    training = _train(qat, (x_fit, y_fit), (x_val, y_val), epochs, lr, batch, seed)

    example = torch.from_numpy(x_test[:1])
    paths = {
        "fp32_ir": _to_ir(ov, fp32, example, folder / "nncf-fp32.xml"),
        "ptq_ir": _to_ir(ov, ptq, example, folder / "nncf-ptq-int8.xml"),
        "qat_ir": _to_ir(ov, qat, example, folder / "nncf-qat-int8.xml"),
        "qat_onnx_qdq": None,
    }
    onnx_top1 = None
    try:
        paths["qat_onnx_qdq"] = _to_onnx_qdq(qat, example, folder / "nncf-qat-int8-qdq.onnx")
        onnx_top1 = _onnx_top1(paths["qat_onnx_qdq"], x_test, y_test)
    except Exception as exc:  # the report says what failed; the IR figures still stand
        notes.append(f"ONNX QDQ export of the QAT model failed: {type(exc).__name__}: {exc}"[:400])

    loaded = {name: _load(paths[f"{name}_ir"], threads, name) for name in ("fp32", "ptq", "qat")}
    ov_top1 = {
        name: _top1(model.run(_feeds(model, x_test))[0], y_test) for name, model in loaded.items()
    }
    torch_top1 = {
        name: _torch_top1(model, x_test, y_test)
        for name, model in (("fp32", fp32), ("ptq", ptq), ("qat", qat))
    }
    speed = {
        name: _speed(loaded["fp32"], loaded[name], x_test[:batch], batch, seconds, threads)
        for name in ("ptq", "qat")
    }
    for model in loaded.values():
        model.close()
    return {
        "api": "nncf.quantize(nn.Module, nncf.Dataset) [function-hook backend], Adam fine-tuning, "
        "ov.convert_model(model, example_input); ONNX via QuantizerExportMode."
        "ONNX_QUANTIZE_DEQUANTIZE_PAIRS + torch.onnx.export(dynamo=False)",
        "versions": {
            "nncf": nncf.__version__,
            "openvino": ov.__version__,
            "torch": torch.__version__,
        },
        "fp32_top1": ov_top1["fp32"],
        "ptq_top1": ov_top1["ptq"],
        "qat_top1": ov_top1["qat"],
        "torch_top1": torch_top1,
        "onnx_qdq_top1": onnx_top1,
        "samples": int(len(y_test)),
        "calibration_seconds": calibration_seconds,
        **training,
        "speed": speed,
        "layer_precisions": {
            name: model.details.get("layer_precisions") for name, model in loaded.items()
        },
        "paths": {k: str(v) if v else None for k, v in paths.items()},
        "notes": notes,
    }


def _wrapped_class() -> type:
    import torch

    class Wrapped(torch.nn.Module):
        """Holds the model one level down, so NNCF's hook storage is not a Sequential layer."""

        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.inner(x)

    return Wrapped


def _wrap(inner: Any) -> Any:
    return _wrapped_class()(inner)


def _hold_out(
    x: np.ndarray, y: np.ndarray, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_fit, y_fit, x_val, y_val): HELD_OUT of the training set, stratified, for stopping."""
    from sklearn.model_selection import train_test_split

    x_fit, x_val, y_fit, y_val = train_test_split(
        x, y, test_size=HELD_OUT, random_state=seed, stratify=y
    )
    return x_fit, y_fit, x_val, y_val


def _train(
    model: Any,
    fit: tuple[np.ndarray, np.ndarray],
    val: tuple[np.ndarray, np.ndarray],
    epochs: int,
    lr: float,
    batch: int,
    seed: int,
) -> dict[str, Any]:
    """Fine-tune in place with early stopping; the best state (epoch 0 = as quantized) is kept."""
    import torch

    xt, yt = torch.from_numpy(fit[0]), torch.from_numpy(fit[1])
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    best_score = _val_score(model, val)
    best = (0, copy.deepcopy(model.state_dict()))
    history = [{"epoch": 0, "val_top1": best_score[0], "val_loss": -best_score[1]}]
    t0 = time.perf_counter()
    epochs_run = 0
    for epoch in range(1, epochs + 1):
        model.train()
        order = torch.randperm(len(xt), generator=generator)
        for start in range(0, len(xt), batch):
            index = order[start : start + batch]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[index]), yt[index]).backward()
            optimizer.step()
        epochs_run = epoch
        score = _val_score(model, val)
        history.append({"epoch": epoch, "val_top1": score[0], "val_loss": -score[1]})
        if score > best_score:
            best_score, best = score, (epoch, copy.deepcopy(model.state_dict()))
        elif epoch - best[0] >= PATIENCE:
            break
    seconds = time.perf_counter() - t0
    model.load_state_dict(best[1])
    model.eval()
    return {
        "training_seconds": seconds,
        "epochs_run": epochs_run,
        "best_epoch": best[0],
        "val_top1_best": best_score[0],
        "history": history,
    }


def _val_score(model: Any, val: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    """(top-1, -loss) on the held-out split: higher is better, loss breaks top-1 ties."""
    import torch

    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(val[0]))
        loss = float(torch.nn.functional.cross_entropy(logits, torch.from_numpy(val[1])))
    return _top1(logits.numpy(), val[1]), -loss


def _torch_top1(model: Any, x: np.ndarray, y: np.ndarray) -> float:
    import torch

    model.eval()
    with torch.no_grad():
        return _top1(model(torch.from_numpy(x)).numpy(), y)


def _top1(logits: np.ndarray, y: np.ndarray) -> float:
    return float((np.asarray(logits).argmax(1) == y).mean())


def _to_ir(ov: Any, model: Any, example: Any, path: Path) -> Path:
    """The documented export: trace with ov.convert_model, save without FP16 weights."""
    model.eval()
    with warnings.catch_warnings():
        # The tracer's self-check reruns the model and warns that NNCF's quantizers differ.
        warnings.simplefilter("ignore")
        ov.save_model(
            ov.convert_model(model, example_input=example), str(path), compress_to_fp16=False
        )
    return path


def _to_onnx_qdq(model: Any, example: Any, path: Path) -> Path:
    """QuantizeLinear/DequantizeLinear ONNX (opset 17, dynamic batch) of an NNCF-quantized copy."""
    import onnx
    import torch
    from nncf.torch.quantization.layers import BaseQuantizer, QuantizerExportMode

    model = copy.deepcopy(model).eval()
    for layer in model.modules():
        if isinstance(layer, BaseQuantizer):
            layer.set_export_mode(QuantizerExportMode.ONNX_QUANTIZE_DEQUANTIZE_PAIRS)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=["image"],
            output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
            opset_version=17,
            dynamo=False,
        )
    onnx.checker.check_model(str(path))
    ops = {node.op_type for node in onnx.load(str(path)).graph.node}
    if "QuantizeLinear" not in ops:
        raise RuntimeError(f"{path.name} has no QuantizeLinear node (ops: {sorted(ops)})")
    return path


def _onnx_top1(path: Path, x: np.ndarray, y: np.ndarray) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return _top1(session.run(None, {session.get_inputs()[0].name: x})[0], y)


def _load(path: Path, threads: int | None, name: str) -> Any:
    """The IR compiled by the project's OpenVINO backend; details['input_name'] names its input."""
    import openvino as ov

    from optistudio.core.backends import SessionOptions, get_backend

    options = SessionOptions(
        device="cpu",
        threads=threads,
        spin_wait=False,
        precision="fp32" if name == "fp32" else "int8",
    )
    model = get_backend("openvino").load(path, options)
    model.details["input_name"] = ov.Core().read_model(str(path)).inputs[0].get_any_name()
    return model


def _feeds(model: Any, x: np.ndarray) -> dict[str, np.ndarray]:
    return {model.details["input_name"]: x}


def _speed(
    fp32: Any, int8: Any, x: np.ndarray, batch: int, seconds: float, threads: int | None
) -> dict[str, Any]:
    """INT8 against FP32 in ABBA pairs on OpenVINO CPU: the median time ratio and its 95 % CI."""
    from optistudio.core.measure.compare import ComparisonSpec, compare_loaded

    spec = ComparisonSpec(
        backend="openvino",
        batch_size=batch,
        threads=threads,
        min_pairs=30,
        min_seconds=seconds,
        max_seconds=10 * seconds,
    )
    result = compare_loaded(fp32, int8, _feeds(fp32, x), _feeds(int8, x), spec)
    return {
        "speedup": 1 / result.ratio,
        "speedup_low": 1 / result.high,
        "speedup_high": 1 / result.low,
        "ratio": result.ratio,
        "ratio_low": result.low,
        "ratio_high": result.high,
        "verdict": result.verdict,
        "pairs": result.pairs,
        "fp32_p50_ms": result.a_p50_ms,
        "int8_p50_ms": result.b_p50_ms,
        "threads": result.threads,
        "sentence": result.sentence,
    }
