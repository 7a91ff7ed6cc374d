"""A Sigmoid mapped onto a range by constants is a regressor's score, also as a scalar.

PLCMOS ends in Gemm -> Squeeze -> Sigmoid -> Mul 4 -> Add 1 and returns one scalar (its MOS of
1-5): no task was recognized. AECMOS ends the same way with an output declared [batch_size]:
regression (low), one moderate fact. The graphs here end as they do.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from evaluator_graphs import save, tensor, weight
from onnx import helper, numpy_helper

from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.numerics.evaluators.base import Recognition, evaluators
from optistudio.core.numerics.evaluators.recognize import as_run, model_facts, read_task
from optistudio.core.numerics.evaluators.rescaled import rescaled_outputs
from optistudio.core.optimize.run import optimize
from optistudio.core.optimize.spec import OptimizeSpec

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.1, max_seconds=2.0, threads=1)


def mos_head(path: Path, declared: list, *, batch: int | str = 1, scale_by: str = "four") -> Path:
    """x [batch, 16] -> MatMul -> [batch, 1] -> Squeeze -> Sigmoid -> Mul 4 -> Add 1 -> 'score'
    declared `declared` ([]: a scalar). `scale_by` 'x2' multiplies by a second input
    instead of a constant (no longer a rescaling)."""
    four = helper.make_node(
        "Constant", [], ["four"], value=numpy_helper.from_array(np.array(4.0, np.float32))
    )
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"]),
        helper.make_node("Squeeze", ["h"], ["s"]),
        helper.make_node("Sigmoid", ["s"], ["p"]),
        four,
        helper.make_node("Mul", ["p", scale_by], ["scaled"]),
        helper.make_node("Add", ["scaled", "one"], ["score"]),
    ]
    inputs = [tensor("x", [batch, 16])]
    if scale_by != "four":
        inputs.append(tensor(scale_by, []))
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    output = helper.make_tensor_value_info("score", onnx.TensorProto.FLOAT, declared)
    return save(path, nodes, inputs, [output], initializers=[weight("W", (16, 1)), one])


def _read(path: Path) -> tuple[str | None, str | None]:
    found = read_task(model_facts(path)).found
    return (found[1].task, found[1].confidence) if found else (None, None)


def test_a_scalar_sigmoid_score_is_a_regressor(tmp_path: Path) -> None:
    model = mos_head(tmp_path / "plcmos.onnx", [])

    task, confidence = _read(model)
    reasons = read_task(model_facts(model)).reasons

    assert (task, confidence) == ("regression", "medium")
    assert any("score (a scalar) holds one float per sample" in line for line in reasons)
    assert any("Sigmoid scaled and shifted by constants" in line for line in reasons)


def test_a_rescaled_score_per_sample_reads_above_low(tmp_path: Path) -> None:
    model = mos_head(tmp_path / "aecmos.onnx", ["batch_size"], batch="batch_size")

    assert _read(model) == ("regression", "medium")


def test_scaling_by_another_input_is_no_rescaling(tmp_path: Path) -> None:
    model = mos_head(tmp_path / "gated.onnx", [], scale_by="x2")

    assert rescaled_outputs(onnx.load(model).graph) == {}
    assert _read(model) == ("regression", "low")  # one float per sample, nothing more


def test_a_shape_left_unknown_is_no_scalar_until_a_run_shows_one(tmp_path: Path) -> None:
    model = mos_head(tmp_path / "unknown.onnx", [])
    proto = onnx.load(model)
    proto.graph.output[0].type.tensor_type.ClearField("shape")  # as some exporters leave it
    onnx.save(proto, model)
    facts = model_facts(model)

    assert facts.outputs[0].scalar is False
    assert read_task(facts).found is None
    ran = as_run(facts, {"x": [1, 16], "score": []})
    assert ran is not None and ran.outputs[0].scalar
    assert read_task(ran).found[1].task == "regression"


def test_the_regression_judge_takes_a_scalar_as_the_one_sample() -> None:
    tally = (
        evaluators.get("regression")
        .create()
        .tally(Recognition(task="regression", reason="t", outputs=["score"]))
    )
    tally.add(
        {"score": np.array(4.0, np.float32)}, {"score": np.array(4.2, np.float32)}, first_sample=0
    )

    score = tally.score()

    assert score.metrics["mean_relative_error"] == pytest.approx(0.05, rel=1e-5)


def test_optimize_judges_a_scalar_score_as_regression(tmp_path: Path) -> None:
    model = mos_head(tmp_path / "plcmos.onnx", [])
    spec = OptimizeSpec(recipes=["int8_dynamic"], comparison=QUICK, accuracy_samples=4)

    report = optimize(model, spec, out_dir=tmp_path / "out")

    assert (report.task, report.task_confidence) == ("regression", "medium")
    variant = report.variants[0]
    assert variant.status == "made", variant.error
    assert "mean_relative_error" in variant.accuracy.task_metrics
