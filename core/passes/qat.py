"""Quantization-aware training (QAT): fine-tune the model under simulated INT8, then quantize it.

Post-training INT8 rounds weights and activations the model never saw rounded; on depthwise
CNNs that can cost several points of top-1. QAT lets the weights adapt to the rounding:

1. ONNX Runtime's pre-processing and a post-training INT8 quantization (ranges calibrated on
   the *training* inputs) of the model: where ONNX Runtime puts its Q/DQ pairs is read off it.
2. The pre-processed model becomes a PyTorch module (optistudio.core.torch_bridge) with fake
   quantization at exactly those places, with ONNX Runtime's arithmetic (qat_fakequant).
3. A few epochs of fine-tuning (qat_train): cross-entropy with labels, distillation against
   the FP32 outputs without; early stopping on a held-out share of the training data.
4. The tuned weights are written back into the pre-processed ONNX model, name for name, and
   ONNX Runtime quantizes it with the trained activation ranges: a QDQ model like int8_static's,
   which ONNX Runtime and OpenVINO both run.

The evaluation data (--calib / --labels) is never trained on. torch is the optional extra
`qat`; without it the pass refuses in one sentence. Ops outside the bridge's set are refused,
named, before anything runs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import onnx
from onnx import numpy_helper
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.errors import BackendUnavailable, PassFailed
from optistudio.core.loader import load
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.torch_bridge.support import (
    UnsupportedOps,
    torch_available,
    unsupported_ops,
)

logger = logging.getLogger(__name__)

TORCH_MISSING = "Quantization-aware training needs PyTorch: install the extra with pip install 'optistudio[qat]'."


class QatConfig(BaseModel):
    """Options of qat."""

    model_config = ConfigDict(extra="forbid")

    train_path: str | None = Field(
        None,
        description="Training inputs: an .npz of named input arrays (samples first), or a "
        "folder or .zip of images. Never the evaluation data.",
    )
    train_labels_path: str | None = Field(
        None,
        description="Class ids of the training samples (.npy or .csv), one per sample. Without "
        "them the model is distilled from its FP32 outputs instead.",
    )
    image_preprocessing: ImagePreprocessing | None = Field(
        None, description="How training images become inputs (folder or .zip data)."
    )
    epochs: int = Field(8, ge=1, le=1000, description="At most this many passes over the data.")
    patience: int = Field(
        3, ge=1, description="Stop after this many epochs without a better validation metric."
    )
    max_minutes: float = Field(
        30.0, gt=0, description="Stop training (keeping the best epoch) after this long."
    )
    batch_size: int = Field(32, ge=1, le=4096, description="Training samples per step.")
    learning_rate: float = Field(1e-4, gt=0, le=1.0, description="Adam's learning rate.")
    validation_fraction: float = Field(
        0.15, gt=0, lt=0.9, description="Share of the training data held out for early stopping."
    )
    observe_epochs: int = Field(
        1,
        ge=0,
        description="Epochs during which activation ranges keep following the data "
        "(moving average); frozen afterwards.",
    )
    output: str | None = Field(
        None, description="Output the loss reads (logits or probabilities); empty = the first."
    )
    calibration: str = Field(
        "minmax", description="Calibration method of the starting ranges (as int8_static's)."
    )
    per_channel: bool = Field(True, description="One weight scale per output channel.")
    reduce_range: bool | None = Field(
        None, description="7-bit weights; default: as the CPU needs (as int8_static)."
    )
    max_train_samples: int = Field(
        50_000, ge=2, description="Read at most this many training samples into memory."
    )
    seed: int = Field(0, description="Seed of the split, the shuffling and torch.")
    threads: int | None = Field(
        None, ge=1, description="torch threads while training; empty = torch's default."
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto",
        description="Where torch trains: auto = the GPU when the worker's torch sees one "
        "(CUDA), else the CPU.",
    )


def run_qat(model: Path, out: Path, config: QatConfig, context: PassContext) -> PassReport:
    """Fine-tune under fake INT8 and quantize with ONNX Runtime; see the module docstring."""
    if not torch_available():
        raise BackendUnavailable(TORCH_MISSING)
    missing = unsupported_ops(onnx.load(model, load_external_data=False))
    if missing:
        raise UnsupportedOps(missing)
    if not config.train_path:
        raise PassFailed(
            "Quantization-aware training needs training data, and none was given.",
            hint="Give training inputs (--train X.npz, and --train-labels y.npy if you have "
            "them; on the Optimize page, 'Training data for QAT'), separate from the evaluation "
            "data.",
        )
    started = time.monotonic()
    report: PassReport = load(TRAIN_AND_QUANTIZE)(model, out, config, context)  # imports torch
    report.details["total_seconds"] = round(time.monotonic() - started, 2)
    return report


QAT_RECIPE = "qat"
TRAIN_AND_QUANTIZE = "optistudio.core.passes.qat_run:train_and_quantize"
PTQ_PASSES = (
    "int8_dynamic",
    "int8_static",
    "int8_mixed",
    "int8_nncf",
    "int8_nncf_ov",
    "int8_nncf_ov_ac",
    "int8_placed",
)


def is_ptq(steps: list[str]) -> bool:
    """Whether a recipe of these pass names is post-training INT8."""
    return any(step in PTQ_PASSES for step in steps)


def auto_offer(
    *,
    auto: bool,
    ptq_within_budget: list[bool],
    training_given: bool,
    ptq_failed: Sequence[str] = (),
) -> tuple[bool, str | None]:
    """Auto's rule: add QAT when every post-training INT8 candidate that was measured (there
    was at least one) missed the budget and training data was given; the note says what
    happened or what to give.

    `ptq_within_budget` holds one entry per candidate that was made, judged and timed;
    `ptq_failed` names each that failed outright ('label: error'). Those are never counted as
    misses: the note names them as failed."""
    if not auto or any(ptq_within_budget):
        return False, None
    failed = "; ".join(ptq_failed)
    if not ptq_within_budget:
        return False, (
            "Every post-training INT8 candidate failed outright, so none was judged against "
            f"the accuracy budget ({failed}); see each one's error."
            if ptq_failed
            else None
        )
    missed = (
        "Every post-training INT8 candidate that was measured missed the accuracy budget, "
        f"the others failed outright ({failed})"
        if ptq_failed
        else "Every post-training INT8 candidate missed the accuracy budget"
    )
    if not training_given:
        return False, (
            f"{missed}; give training data (--train, with --train-labels if you have them; on "
            "the Optimize page, 'Training data for QAT') and Auto tries quantization-aware "
            "training (the qat recipe) too."
        )
    if not torch_available():
        return False, f"{missed}; {TORCH_MISSING[0].lower()}{TORCH_MISSING[1:]}"
    return (
        True,
        f"{missed}, so Auto added quantization-aware training (qat) on the training data given.",
    )


def write_weights(model: onnx.ModelProto, weights: dict[str, np.ndarray]) -> int:
    """Replace initializers by name with `weights` (same dtype); returns how many."""
    replaced = 0
    for init in model.graph.initializer:
        if init.name in weights:
            dtype = numpy_helper.to_array(init).dtype
            init.CopyFrom(numpy_helper.from_array(weights[init.name].astype(dtype), init.name))
            replaced += 1
    return replaced


QAT = PassInfo(
    name="qat",
    label="INT8 quantization-aware training",
    description=(
        "Fine-tunes the model for a few epochs with INT8 rounding simulated exactly where and "
        "how ONNX Runtime's static INT8 rounds (PyTorch, on the training data you give, with "
        "labels or by distillation from the FP32 outputs), then quantizes it to QDQ INT8 with "
        "the trained ranges. For models that post-training INT8 makes too inaccurate; needs "
        "the 'qat' extra (torch) and training data."
    ),
    config="optistudio.core.passes.qat:QatConfig",
    implementation="optistudio.core.passes.qat:run_qat",
    needs_calibration=False,
    produces_precision="int8",
)
