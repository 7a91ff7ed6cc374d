"""The QAT pass's work once torch is known to be there (see optistudio.core.passes.qat)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from optistudio.core.data.datasets import load_labels, open_dataset
from optistudio.core.errors import DataMismatch
from optistudio.core.model.info import TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.calibration import collect_activation_stats, compute_ranges
from optistudio.core.passes import qat_fakequant, qat_train
from optistudio.core.passes.base import PassContext, PassReport
from optistudio.core.passes.qat import QatConfig, write_weights
from optistudio.core.passes.quantize import (
    Int8StaticConfig,
    _default_static_op_types,
    _dequantized_consumers,
    _op_counts,
    _per_channel_ready,
    _preprocess,
    _quantize_with_ranges,
    describe_range,
)
from optistudio.core.progress import scaled
from optistudio.core.torch_bridge import UnsupportedOps, to_torch, unsupported_ops

NO_SIZE_LIMIT = 2**62
READ_BATCH = 256


class ArraySource:
    """In-memory inputs as a calibration source."""

    synthetic = False

    def __init__(self, arrays: dict[str, np.ndarray], description: str, batch: int = 64) -> None:
        self.arrays, self._description, self.batch = arrays, description, batch

    @property
    def description(self) -> str:
        return self._description

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        total = len(next(iter(self.arrays.values())))
        for start in range(0, total, self.batch):
            yield {name: a[start : start + self.batch] for name, a in self.arrays.items()}


def train_and_quantize(
    model: Path, out: Path, config: QatConfig, context: PassContext
) -> PassReport:
    """Steps 1-4 of optistudio.core.passes.qat's docstring."""
    reference = _ptq_reference(model, config, context)
    context.progress(0.12, "building the PyTorch module")
    module = to_torch(reference.proto)
    data, settings = training_setup(
        module, reference.proto, reference.arrays, reference.labels, config
    )
    fp32_val, _ = qat_train.evaluate(module, data, settings)
    layout = qat_fakequant.read_layout(reference.ptq, reference.proto)
    weights = qat_fakequant.attach(module, layout, reference.ranges)
    data.device = qat_train.training_device(config.device)
    module.to(data.device)
    with _torch_threads(config.threads):
        outcome = qat_train.fine_tune(module, data, settings, scaled(context.progress, 0.15, 0.9))
    module.to("cpu")
    context.progress(0.9, "quantizing the tuned model")
    qat_fakequant.strip(module)
    write_weights(reference.proto, module.onnx_weights())
    tuned = reference.work / "tuned.onnx"
    onnx.save(reference.proto, tuned)
    trained = reference.ranges | qat_fakequant.trained_ranges(module)
    reference.quantize(tuned, out, trained)
    context.progress(1.0, "quantized")
    details = _details(config, data, settings, outcome, fp32_val, layout, weights, reference.source)
    details |= {
        "quantized_nodes": _dequantized_consumers(out),
        "qdq_nodes": {op: _op_counts(out)[op] for op in ("QuantizeLinear", "DequantizeLinear")},
    }
    return PassReport(output=out, details=details, warnings=reference.warnings)


@dataclass
class Reference:
    """The pre-processed float model, the training data, and its post-training quantization."""

    work: Path
    proto: onnx.ModelProto
    arrays: dict[str, np.ndarray]
    labels: np.ndarray | None
    source: str
    ranges: dict[str, tuple[float, float]]
    ptq: Path
    warnings: list[str]
    quantize: Callable[[Path, Path, dict[str, tuple[float, float]]], object]


def _ptq_reference(model: Path, config: QatConfig, context: PassContext) -> Reference:
    """ONNX Runtime's pre-processing, then static INT8 calibrated on the training inputs, as
    int8_static does it (same options, same quantizer)."""
    work = context.work_dir / "qat"
    work.mkdir(parents=True, exist_ok=True)
    static = Int8StaticConfig(
        calibration=config.calibration,  # type: ignore[arg-type]
        per_channel=config.per_channel,
        reduce_range=config.reduce_range,
    )
    context.progress(0.0, "pre-processing")
    prepared, warnings = _preprocess(model, work, static)
    prepared, static, notes = _per_channel_ready(prepared, work, static)
    proto = onnx.load(prepared)
    missing = unsupported_ops(proto)
    if missing:
        raise UnsupportedOps(missing)
    arrays, labels, description = read_training(
        config, inspect_model(model, max_bytes=NO_SIZE_LIMIT).inputs
    )
    source = ArraySource(arrays, description)
    op_types = _default_static_op_types()
    progress = scaled(context.progress, 0.02, 0.1)
    stats = collect_activation_stats(
        prepared, source, progress=progress, op_types=op_types, work_dir=work
    )
    ranges = compute_ranges(config.calibration, stats.collectors)
    local = replace(context, work_dir=work)

    def quantize(float_model: Path, target: Path, chosen: dict[str, tuple[float, float]]) -> object:
        return _quantize_with_ranges(float_model, target, chosen, static, op_types, source, local)

    quantize(prepared, work / "ptq.onnx", ranges)
    return Reference(
        work,
        proto,
        arrays,
        labels,
        description,
        ranges,
        work / "ptq.onnx",
        warnings + notes,
        quantize,
    )


@contextmanager
def _torch_threads(threads: int | None) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def read_training(
    config: QatConfig, inputs: list[TensorSpec]
) -> tuple[dict[str, np.ndarray], np.ndarray | None, str]:
    """The training inputs by name (at most max_train_samples), their labels, a description."""
    assert config.train_path is not None
    dataset = open_dataset(
        Path(config.train_path),
        inputs,
        batch_size=READ_BATCH,
        preprocessing=config.image_preprocessing,
    )
    parts: dict[str, list[np.ndarray]] = {spec.name: [] for spec in inputs}
    count = 0
    for batch in dataset.batches():
        for name in parts:
            parts[name].append(batch[name])
        count += len(next(iter(batch.values())))
        if count >= config.max_train_samples:
            break
    arrays = {
        name: np.concatenate(chunks)[: config.max_train_samples] for name, chunks in parts.items()
    }
    kept = len(next(iter(arrays.values())))
    if kept < 2:
        raise DataMismatch(
            f"The training data holds {kept} sample; quantization-aware training needs at least 2.",
            hint="Give more training samples (hundreds or more).",
        )
    labels = None
    if config.train_labels_path:
        total = len(dataset) if hasattr(dataset, "__len__") else kept
        labels = load_labels(Path(config.train_labels_path), samples=total)[:kept]
    return arrays, labels, dataset.description


def training_setup(
    module: Any,
    proto: onnx.ModelProto,
    arrays: dict[str, np.ndarray],
    labels: np.ndarray | None,
    config: QatConfig,
) -> tuple[qat_train.TrainingArrays, qat_train.TrainSettings]:
    """Split the data, choose the loss and the output it reads, compute distillation targets."""
    outputs = list(module.output_names)
    if config.output is not None and config.output not in outputs:
        raise DataMismatch(
            f"The model has no output {config.output!r}. Its outputs: {', '.join(outputs)}."
        )
    index = outputs.index(config.output) if config.output else 0
    loss: qat_train.LossKind = "distillation"
    if labels is not None:
        loss = "nll" if _ends_in_softmax(proto, outputs[index]) else "cross_entropy"
    settings = qat_train.TrainSettings(
        epochs=config.epochs,
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        patience=config.patience,
        max_seconds=config.max_minutes * 60,
        observe_epochs=config.observe_epochs,
        output_index=index,
        loss=loss,
        seed=config.seed,
    )
    inputs = [arrays[name] for name in module.input_names]
    total = len(inputs[0])
    order = np.random.default_rng(config.seed).permutation(total)
    held = min(max(1, round(total * config.validation_fraction)), total - 1)
    targets = None
    if labels is None:
        targets = qat_train.teacher_outputs(module, inputs, index, config.batch_size)
    else:
        _check_labels(module, inputs, labels, index)
    data = qat_train.TrainingArrays(inputs, labels, targets, train=order[held:], val=order[:held])
    return data, settings


def _ends_in_softmax(proto: onnx.ModelProto, output: str) -> bool:
    return any(node.op_type == "Softmax" and output in node.output for node in proto.graph.node)


def _check_labels(module: Any, inputs: list[np.ndarray], labels: np.ndarray, index: int) -> None:
    import torch

    with torch.no_grad():
        first = module(*(torch.from_numpy(np.ascontiguousarray(x[:1])) for x in inputs))[index]
    classes = int(first[0].numel())
    if labels.min() < 0 or labels.max() >= classes:
        raise DataMismatch(
            f"The training labels run from {labels.min()} to {labels.max()}, but the model's "
            f"output has {classes} classes.",
            hint="Give class ids between 0 and the number of classes minus 1.",
        )


def _details(
    config, data, settings, outcome, fp32_val, layout, weights, description
) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    metric = qat_train.metric_name(settings.loss)
    return {
        "training": {
            "source": description,
            "train_samples": int(len(data.train)),
            "validation_samples": int(len(data.val)),
            "loss": settings.loss,
            "labels": data.labels is not None,
        },
        "epochs_run": len(outcome.losses),
        "best_epoch": outcome.best_epoch,
        "stopped_by": outcome.stopped,
        "steps": outcome.steps,
        "training_seconds": round(outcome.seconds, 2),
        "history": {
            "train_loss": [round(v, 6) for v in outcome.losses],
            f"val_{metric}": [round(v, 6) for v in outcome.val],
        },
        "validation": {
            "metric": metric,
            "fp32": round(fp32_val, 6),
            "int8_before_training": round(outcome.val[0], 6),
            "int8_after_training": round(outcome.val[outcome.best_epoch], 6),
        },
        "fake_quantized": {"activations": len(layout.activations), "weights": weights},
        "device": data.device,
        "torch_threads": config.threads or "default",
        "reduce_range": describe_range(config.reduce_range),
    }
