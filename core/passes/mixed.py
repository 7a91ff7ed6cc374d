"""int8_mixed: static INT8 with the most sensitive nodes kept in FP32 until an accuracy budget holds.

Search. Trial 0 quantizes every node as int8_static does. If its outputs are within the budget
(optistudio.core.numerics.accuracy, against the float model on the first `accuracy_batches` calibration batches) it
is the result. Otherwise the nodes are ranked by optistudio.core.numerics.sensitivity.layer_errors (float model vs
trial 0, by the relative noise each layer adds, a heuristic) and trial k re-quantizes with the k
most sensitive quantized nodes excluded, k = 1, 2, 4, 8, ... It stops at the first trial within
budget, after `max_trials` trials (trial 0 included), when every ranked node is in FP32, or when
the next trial would end past `time_limit_s` (judged by the last trial's duration). The result is
the trial within budget with the fewest FP32 nodes, else the one with the highest mean cosine.

Cost: every trial calibrates, quantizes and compares again. Doubling k keeps the trial count
logarithmic in the nodes that end in FP32, at the price of keeping up to twice as many as the
fewest that would do (there is no bisection back).

Names. The model is pre-processed once with shape inference only (ONNX Runtime's graph
optimisation renames the nodes it fuses) and unnamed or repeated node names are made unique
(optistudio.core.passes.prepare), so `fp32_nodes` are node names of the original graph where
it named them, and every trial quantizes the same graph.
"""

from __future__ import annotations

import itertools
import logging
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx.external_data_helper import uses_external_data
from pydantic import Field

from optistudio.core.data.source import CalibrationSource
from optistudio.core.errors import PassFailed
from optistudio.core.numerics.accuracy import (
    AccuracyBudget,
    AccuracyReport,
    accuracy_report,
    within_budget,
)
from optistudio.core.numerics.sensitivity import LayerError, layer_errors
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.int8_options import StaticInt8Options
from optistudio.core.passes.prepare import prepare_for_quantizer
from optistudio.core.passes.quantize import Int8StaticConfig, run_int8_static
from optistudio.core.progress import scaled

logger = logging.getLogger(__name__)

REPORTED_LAYERS = 10
_DEQUANTIZE = "DequantizeLinear"
_EXTERNAL_DATA_BYTES = 2**31 - 2**27


class MixedPrecisionConfig(StaticInt8Options):
    """Options of int8_mixed."""

    budget: AccuracyBudget = Field(
        default_factory=AccuracyBudget,
        description="What the result may lose against the float model (checked on the "
        "calibration data; without labels top-1 means agreement with the float model).",
    )
    max_trials: int = Field(
        6, ge=1, le=64, description="Most quantizations tried, the all-INT8 one included."
    )
    time_limit_s: float = Field(
        120.0, gt=0, description="No trial starts that would likely end after this many seconds."
    )
    accuracy_batches: int = Field(
        16, ge=1, description="Calibration batches used to check accuracy and rank layers."
    )


def run_int8_mixed(
    model: Path, out: Path, config: MixedPrecisionConfig, context: PassContext
) -> PassReport:
    """Static INT8 with a growing set of sensitive nodes in FP32; see the module docstring."""
    source = context.require_calibration("INT8 mixed precision")
    search = _Search(model, config, context, source)
    ranking: list[LayerError] = []
    if not search.trial([]).within:
        ranking = search.rank()
        search.fall_back(_candidates(ranking, search.trials[0].path))
    best = search.best()
    _copy_model(best.path, out)
    shutil.rmtree(search.work, ignore_errors=True)
    context.progress(1.0, f"kept trial {best.number} ({len(best.excluded)} node(s) in FP32)")
    return PassReport(
        output=out, details=_details(search, best, ranking), warnings=_warnings(search, best)
    )


@dataclass
class _Trial:
    """One quantization tried: what stayed in FP32 and what it cost and gave."""

    number: int
    excluded: list[str]
    path: Path
    accuracy: AccuracyReport
    within: bool
    note: str
    seconds: float
    report: PassReport

    def summary(self) -> dict[str, Any]:
        return {
            "trial": self.number,
            "excluded": self.excluded,
            "mean_cosine": self.accuracy.mean_cosine,
            "top1_agreement": self.accuracy.top1_agreement,
            "within_budget": self.within,
            "budget_note": self.note,
            "seconds": round(self.seconds, 3),
        }


class _Search:
    """The trials of one run and the state that decides whether to try another."""

    def __init__(
        self,
        model: Path,
        config: MixedPrecisionConfig,
        context: PassContext,
        source: CalibrationSource,
    ) -> None:
        self.model, self.config, self.context, self.source = model, config, context, source
        self.work = context.work_dir / "int8_mixed"
        self.work.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.accuracy_data = _FirstBatches(source, config.accuracy_batches)
        self.prepared = _prepare(model, self.work)
        self.trials: list[_Trial] = []
        self.stopped = "budget met"
        self.failures: list[str] = []

    def trial(self, excluded: list[str]) -> _Trial:
        number, began = len(self.trials), time.monotonic()
        folder = self.work / f"trial-{number}"
        step = f"trial {number}: {len(excluded)} node(s) in FP32"
        self.context.progress(number / self.config.max_trials, step)
        report = run_int8_static(
            self.prepared, folder / "model.onnx", self._static_config(excluded), self._inner(folder)
        )
        accuracy = accuracy_report(self.model, report.output, self.accuracy_data)
        within, note = within_budget(accuracy, self.config.budget)
        seconds = time.monotonic() - began
        logger.info("int8_mixed %s: %s (%.1f s)", step, note, seconds)
        trial = _Trial(number, excluded, report.output, accuracy, within, note, seconds, report)
        self.trials.append(trial)
        return trial

    def rank(self) -> list[LayerError]:
        self.context.progress(len(self.trials) / self.config.max_trials, "ranking layers")
        return layer_errors(
            self.prepared,
            self.trials[0].path,
            self.source,
            max_batches=self.config.accuracy_batches,
            work_dir=self.work / "sensitivity",
        )

    def fall_back(self, candidates: list[str]) -> None:
        """Trials with the first 1, 2, 4, ... candidates in FP32 until one stop rule holds."""
        count = 1
        while not self._should_stop(candidates, count):
            try:
                if self.trial(candidates[:count]).within:
                    return
            except PassFailed as exc:
                self.failures.append(f"{len(candidates[:count])} node(s) in FP32: {exc}")
                self.stopped = "a trial failed"
                return
            count *= 2

    def _should_stop(self, candidates: list[str], count: int) -> bool:
        previous = min(count // 2, len(candidates))
        if not candidates or previous == len(candidates):
            self.stopped = "no more nodes to keep in FP32"
        elif len(self.trials) >= self.config.max_trials:
            self.stopped = "max_trials reached"
        elif self.elapsed() + self.trials[-1].seconds > self.config.time_limit_s:
            self.stopped = "time limit"
        else:
            return False
        return True

    def best(self) -> _Trial:
        """Within budget with the fewest FP32 nodes, else the highest mean cosine."""
        within = [trial for trial in self.trials if trial.within]
        if within:
            return min(within, key=lambda t: (len(t.excluded), -t.accuracy.mean_cosine))
        return max(self.trials, key=lambda t: t.accuracy.mean_cosine)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _static_config(self, excluded: list[str]) -> Int8StaticConfig:
        return Int8StaticConfig.model_validate(
            {
                "calibration": self.config.calibration,
                "per_channel": self.config.per_channel,
                "reduce_range": self.config.reduce_range,
                "nodes_to_exclude": excluded,
                "preprocess": False,
            }
        )

    def _inner(self, folder: Path) -> PassContext:
        slot, width = len(self.trials), 1 / self.config.max_trials
        return PassContext(
            work_dir=folder,
            target_backend=self.context.target_backend,
            calibration=self.source,
            progress=scaled(
                self.context.progress, slot * width, (slot + 1) * width, prefix=f"trial {slot}: "
            ),
        )


class _FirstBatches:
    """A calibration source cut to its first `count` batches."""

    def __init__(self, source: CalibrationSource, count: int) -> None:
        self.source, self.count = source, count
        self.synthetic = bool(getattr(source, "synthetic", False))

    @property
    def description(self) -> str:
        return f"first {self.count} batches of {self.source.description}"

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        return itertools.islice(self.source.batches(), self.count)


def _prepare(model: Path, work: Path) -> Path:
    """A copy with every node named uniquely and shapes inferred, but no graph optimisation
    (optistudio.core.passes.prepare); the model as it is where that fails."""
    return prepare_for_quantizer(model, work / "prepared", optimize=False).path


def _candidates(ranking: list[LayerError], quantized: Path) -> list[str]:
    """Quantized nodes in ranking order, each once."""
    graph = onnx.load(quantized, load_external_data=False).graph
    fed = {name for node in graph.node if node.op_type == _DEQUANTIZE for name in node.output}
    quantized_nodes = {node.name for node in graph.node if fed.intersection(node.input)}
    quantized_nodes.discard("")
    ordered = (error.quantized_node for error in ranking)
    return list(dict.fromkeys(name for name in ordered if name in quantized_nodes))


def _external(model: Path) -> bool:
    graph = onnx.load(model, load_external_data=False).graph
    return any(uses_external_data(init) for init in graph.initializer)


def _save(proto: onnx.ModelProto, path: Path) -> None:
    big = _initializer_bytes(proto) > _EXTERNAL_DATA_BYTES
    onnx.save_model(proto, path, save_as_external_data=big, location=f"{path.name}.data")


def _initializer_bytes(proto: onnx.ModelProto) -> int:
    return sum(len(init.raw_data) for init in proto.graph.initializer)


def _copy_model(source: Path, out: Path) -> None:
    """Copy a model file; one with external data is re-saved so its data follows the new name."""
    out.parent.mkdir(parents=True, exist_ok=True)
    if _external(source):
        _save(onnx.load(source), out)
    else:
        shutil.copyfile(source, out)


def _details(search: _Search, best: _Trial, ranking: list[LayerError]) -> dict[str, Any]:
    return {
        "met_budget": best.within,
        "fp32_nodes": best.excluded,
        "chosen_trial": best.number,
        "budget_note": best.note,
        "stopped": search.stopped,
        "seconds": round(search.elapsed(), 3),
        "trials": [trial.summary() for trial in search.trials],
        "ranking": [error.model_dump() for error in ranking[:REPORTED_LAYERS]],
        "quantized_nodes": best.report.details.get("quantized_nodes", {}),
        "qdq_nodes": best.report.details.get("qdq_nodes", {}),
        "reduce_range": best.report.details.get("reduce_range", ""),
    }


def _warnings(search: _Search, best: _Trial) -> list[str]:
    warnings = list(best.report.warnings)
    if not best.within:
        warnings.append(
            f"No variant met the accuracy budget ({best.note}); kept the one with the highest "
            f"mean cosine (trial {best.number}, {len(best.excluded)} node(s) in FP32)."
        )
    if search.stopped == "time limit":
        warnings.append(
            f"The time limit ({search.config.time_limit_s:g} s) ran out after "
            f"{len(search.trials)} trial(s); kept the best variant found so far."
        )
    warnings += [
        f"A trial failed ({failure}); kept the best earlier one." for failure in search.failures
    ]
    return warnings


INT8_MIXED = PassInfo(
    name="int8_mixed",
    label="INT8 mixed precision (accuracy-aware)",
    description=(
        "Static INT8 (QDQ) that keeps the layers most sensitive to quantization in FP32 until "
        "an accuracy budget holds (mean output cosine, top-1 drop). Layers are ranked by the "
        "quantization noise they add; 1, 2, 4, ... of them stay in FP32, each variant "
        "re-quantized and checked, within a trial and time limit. Reports the nodes left in "
        "FP32 and each trial's accuracy and time."
    ),
    config="optistudio.core.passes.mixed:MixedPrecisionConfig",
    implementation="optistudio.core.passes.mixed:run_int8_mixed",
    needs_calibration=True,
    produces_precision="mixed",
)
