"""INT8 on the OpenVINO model that keeps the run's task: NNCF's accuracy control against the
run's own judge, written as an OpenVINO IR.

int8_nncf_ov quantizes every op NNCF would; on some models (a speech-quality regressor, a
document-orientation classifier) that keeps cosine >= 0.99 on random inputs yet fails the task
on real samples. `nncf.quantize_with_accuracy_control` quantizes as int8_nncf_ov does (same
calibration samples, options and ranges), then, while the validation metric has dropped by
more than `max_drop` from the float model's, reverts to float the group of quantizers whose
INT8 moves the outputs most (ranked by NMSE of the outputs on `ranking_subset_size` validation
samples), one group per iteration, ranking again after a step that made things worse.

The validation metric is the run's judge (optistudio.core.passes.judging, handed in by the run
as context.judge): the candidate, compiled by NNCF at FP32 for the rest, runs on every batch the
run judges variants on, and the run's verdict on its outputs (task metrics, budget, numeric
floor at the INT8 rule) gives

    metric = 1                                 within budget
    metric = 0.5 * clip(worst cosine, 0, 1)    over budget

so with max_drop = 0.25 NNCF stops exactly at the first candidate the judge passes (the float
model's metric is 1 whenever OpenVINO's FP32 itself is within budget), and among candidates
that miss it still prefers the closer. The file kept is judged once more here, and a model
NNCF cannot bring within budget in `max_iterations` reversions is not applicable, with the
sentence of the budget it missed; so is one whose search passes `time_limit_s` (each ranking
runs every group's reversion on the ranking batches, which takes minutes on a large model beside
other work). The run then judges the IR again, as every variant.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from pydantic import Field

from optistudio.core.errors import PassFailed
from optistudio.core.passes.base import PassContext, PassInfo, PassReport
from optistudio.core.passes.judging import VariantJudge, Verdict
from optistudio.core.passes.nncf_openvino import (
    NncfOpenVinoConfig,
    fake_quantize_details,
    front_end_scope,
    openvino_and_nncf,
    openvino_model,
    openvino_types,
    quantized_reshaping,
)
from optistudio.core.passes.nncf_quantize import (
    CalibrationSamples,
    nncf_errors,
    quantize_options,
)
from optistudio.core.passes.prepare import GraphNotApplicable

PASSED = 1.0
MAX_DROP = 0.25
"""Between a pass (1) and the best miss (0.5): NNCF stops at the first candidate judged in."""


class NncfAccuracyConfig(NncfOpenVinoConfig):
    """Options of int8_nncf_ov_ac: int8_nncf_ov's, and how long NNCF may search."""

    max_iterations: int = Field(
        30,
        ge=1,
        le=1000,
        description="Most groups of quantizers NNCF reverts to float, one per iteration, "
        "before the recipe says it cannot keep the task in INT8.",
    )
    ranking_subset_size: int = Field(
        32,
        ge=1,
        description="Judged batches each trial reversion runs on to rank the quantizers by how "
        "far their INT8 moves the outputs.",
    )
    time_limit_s: float = Field(
        900.0,
        gt=0,
        description="Seconds the search may take (ranking included); past them the recipe "
        "says it cannot keep the task in INT8 in that time.",
    )


def run_int8_nncf_ov_ac(
    model: Path, out: Path, config: NncfAccuracyConfig, context: PassContext
) -> PassReport:
    """Quantize the OpenVINO model with NNCF's accuracy control against the run's judge."""
    source = context.require_calibration("Accuracy-controlled NNCF INT8")
    judge = _require_judge(context)
    ov, nncf = openvino_and_nncf()
    proto = onnx.load(model, load_external_data=False)
    converted, opset, warnings = openvino_model(ov, model, proto)
    ignored = openvino_types(config.ignored_types)
    front, front_details = front_end_scope(converted, config, warnings)
    samples = CalibrationSamples(source, proto, config.subset_size, context)
    judged = JudgedRuns(judge, proto, deadline=time.monotonic() + config.time_limit_s)
    context.progress(0.0, "quantizing with NNCF, then reverting layers until the judge passes")
    with nncf_errors(), contextlib.redirect_stdout(sys.stderr):  # NNCF's progress bars
        quantized = quantized_reshaping(
            lambda graph: _controlled(nncf, graph, samples, judged, config, ignored, front),
            converted,
            samples,
            warnings,
        )
    final = judged.final(ov, quantized)
    if not final.within:
        raise _not_kept(final, judged, config)
    context.progress(0.95, "saving the OpenVINO IR")
    target = out.with_suffix(".xml")
    target.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(quantized, str(target), compress_to_fp16=False)
    details = {
        "format": "OpenVINO IR (.xml + .bin)",
        **fake_quantize_details(quantized),
        **front_details,
        **judged.summary(),
        "worst_cosine_kept": round(final.worst_cosine, 4),
        "judge": final.note,
        "opset": opset,
        "calibration": {"samples": samples.used, "source": source.description},
        "nncf_version": nncf.__version__,
    }
    return PassReport(output=target, details=details, warnings=warnings)


def _controlled(
    nncf: Any,
    model: Any,
    samples: CalibrationSamples,
    judged: JudgedRuns,
    config: NncfAccuracyConfig,
    ignored: list[str],
    front: list[str],
) -> Any:
    options = quantize_options(config.model_copy(update={"ignored_types": ignored}), front)
    advanced = options.pop("advanced_parameters", None)  # the same, by another keyword here
    restorer = nncf.AdvancedAccuracyRestorerParameters(
        max_num_iterations=config.max_iterations,
        ranking_subset_size=config.ranking_subset_size,
        num_ranking_workers=1,  # each worker compiles a model copy; the cores are the run's
    )
    return nncf.quantize_with_accuracy_control(
        model,
        nncf.Dataset(samples),
        nncf.Dataset(judged.items(), judged.feed),
        judged.validate,
        max_drop=MAX_DROP,
        drop_type=nncf.DropType.ABSOLUTE,
        advanced_quantization_parameters=advanced,
        advanced_accuracy_restorer_parameters=restorer,
        **options,
    )


class JudgedRuns:
    """NNCF's validation on the run's judged batches: items are (batch number, feed); every
    candidate NNCF validates is run on them and judged by the run (module docstring)."""

    def __init__(
        self, judge: VariantJudge, proto: onnx.ModelProto, deadline: float = float("inf")
    ) -> None:
        self._judge = judge
        self._deadline = deadline
        self._outputs = [value.name for value in proto.graph.output]
        self._dtypes = {
            value.name: onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
            for value in proto.graph.input
        }
        self.history: list[Verdict] = []
        """Each verdict on every batch, in order: the float model's, the quantized one's,
        then those of the reversions NNCF ranked (on every batch when they are few) or kept."""

    def items(self) -> list[tuple[int, dict[str, np.ndarray]]]:
        return list(enumerate(self._judge.batches()))

    def feed(self, item: tuple[int, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        _, batch = item
        return {
            name: np.asarray(array, dtype=self._dtypes.get(name))
            for name, array in batch.items()
            if name in self._dtypes
        }

    def validate(
        self, compiled: Any, items: Iterable[tuple[int, dict[str, np.ndarray]]]
    ) -> tuple[float, list[float]]:
        """The metric on the items given (module docstring) and each one's cosine of the judged
        output (NNCF picks the items that moved most to rank layers on, and ranks each trial
        reversion by the metric on them). Only a validation on every batch is the run's
        verdict and enters the history. OutOfTime once the deadline has passed."""
        if time.monotonic() > self._deadline:
            raise OutOfTime(self.history)
        ran = {number: self.run(compiled, self.feed((number, batch))) for number, batch in items}
        verdict = self._judge.verdict(ran)
        if len(ran) == len(self._judge.batches()):
            self.history.append(verdict)
        return metric(verdict), list(verdict.cosines)

    def run(self, compiled: Any, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The compiled model's outputs for `feed`, in the original's output order."""
        result = compiled(feed)
        by_name = {name: result[port] for port in compiled.outputs for name in port.get_names()}
        return [np.asarray(by_name[name]) for name in self._outputs]

    def final(self, ov: Any, model: Any) -> Verdict:
        """The judge's verdict on the model NNCF returned, compiled at FP32 for the rest."""
        compiled = ov.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        ran = {
            number: self.run(compiled, self.feed((number, batch))) for number, batch in self.items()
        }
        return self._judge.verdict(ran)

    def summary(self) -> dict[str, Any]:
        """How often the run's judge was asked on every batch (the float model, the quantized
        one, each reversion NNCF ranked, when the ranking batches are all of them, or kept),
        and the worst cosine of the float model and of fully quantized INT8."""
        first = [round(v.worst_cosine, 4) for v in self.history[:2]]
        return {"judged": len(self.history), "worst_cosine_float_then_int8": first}


class OutOfTime(GraphNotApplicable):
    """The search passed its time limit before the judge passed."""

    def __init__(self, history: list[Verdict]) -> None:
        best = max((v.worst_cosine for v in history[1:]), default=0.0)
        super().__init__(
            "INT8 that keeps the task could not be made on this model within the pass's time "
            f"limit: NNCF's reversions were judged {max(len(history) - 2, 0)} times on every "
            f"batch and none was within the run's budget (best worst-sample cosine {best:.4f}).",
            hint="Keep the float variants, or raise time_limit_s in the pass settings.",
        )


def metric(verdict: Verdict) -> float:
    """NNCF's metric for the run's verdict: 1 within budget, else half the worst cosine."""
    return PASSED if verdict.within else 0.5 * min(max(verdict.worst_cosine, 0.0), 1.0)


def _require_judge(context: PassContext) -> VariantJudge:
    if context.judge is None:
        raise PassFailed(
            "Accuracy-controlled NNCF INT8 searches against an optimization run's judge, and "
            "this step was run outside one.",
            hint="Run it within optimize (a recipe, or Auto), or use int8_nncf_ov.",
        )
    return context.judge


def _not_kept(final: Verdict, judged: JudgedRuns, config: NncfAccuracyConfig) -> PassFailed:
    if judged.history and not judged.history[0].within:
        why = f"OpenVINO's FP32 model itself is out of the run's budget ({judged.history[0].note})"
    else:
        why = (
            f"NNCF reverted layers to float for at most {config.max_iterations} iterations and "
            f"the model stayed out of the run's budget ({final.note})"
        )
    return GraphNotApplicable(
        f"INT8 that keeps the task could not be made on this model: {why}.",
        hint="Keep the float variants, or raise max_iterations in the pass settings.",
    )


INT8_NNCF_OV_AC = PassInfo(
    name="int8_nncf_ov_ac",
    label="INT8 (NNCF on the OpenVINO model, accuracy-controlled)",
    description=(
        "NNCF's INT8 on the model OpenVINO converted, with NNCF's accuracy control: the layers "
        "whose INT8 moves the outputs most go back to float, one group at a time, until the "
        "run's own judge (the task on its samples, the budget and the numeric floor) passes. "
        "Writes an OpenVINO IR. Runs only within an optimization run; needs calibration data."
    ),
    config="optistudio.core.passes.nncf_accuracy:NncfAccuracyConfig",
    implementation="optistudio.core.passes.nncf_accuracy:run_int8_nncf_ov_ac",
    needs_calibration=True,
    produces_precision="int8",
)
