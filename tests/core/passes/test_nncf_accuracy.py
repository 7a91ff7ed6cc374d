"""int8_nncf_ov_ac: NNCF's INT8 on the OpenVINO model, reverting layers until the run's judge
passes (optistudio.core.passes.nncf_accuracy), on a model built here whose plain NNCF INT8
breaks: its first MatMul reads small features beside one huge one, so a per-tensor INT8 range
on its input rounds every small one to 0."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.errors import PassFailed
from optistudio.core.numerics.accuracy import AccuracyBudget, accuracy_report, within_budget
from optistudio.core.optimize.variant_judge import RunJudge
from optistudio.core.passes.base import PassContext, PassReport, passes
from optistudio.core.passes.prepare import GraphNotApplicable

FEATURES = 16
OUTLIER = 2000.0


class Outliers:
    """Rows of N(0, 1) features whose first one is +-2000: the input the model's first MatMul
    reads all but that one of."""

    description = "outlier rows"

    def __init__(self, seed: int, rows: int = 24) -> None:
        self.seed, self.rows = seed, rows

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        rng = np.random.default_rng(self.seed)
        for _ in range(self.rows):
            x = rng.normal(size=(1, FEATURES)).astype(np.float32)
            x[:, 0] = OUTLIER * np.sign(x[:, 0])
            yield {"x": x}


def build_outlier_model(path: Path) -> Path:
    """x -> MatMul 'reads_small' (its weights' first row 0) -> Relu -> MatMul 'head' -> Tanh."""
    rng = np.random.default_rng(0)
    first = rng.normal(size=(FEATURES, 32)).astype(np.float32)
    first[0, :] = 0.0
    head = (0.05 * rng.normal(size=(32, 8))).astype(np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="reads_small"),
            helper.make_node("Relu", ["h"], ["r"], name="relu"),
            helper.make_node("MatMul", ["r", "w2"], ["z"], name="head"),
            helper.make_node("Tanh", ["z"], ["y"], name="tanh"),
        ],
        "outliers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        initializer=[numpy_helper.from_array(first, "w1"), numpy_helper.from_array(head, "w2")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def outlier_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_outlier_model(tmp_path_factory.mktemp("ac") / "outliers.onnx")


def _judge(model: Path, budget: AccuracyBudget | None = None) -> RunJudge:
    return RunJudge(model, Outliers(seed=1), budget or AccuracyBudget(), "int8")


def _quantized(
    model: Path, folder: Path, name: str, judge: RunJudge | None, **config: object
) -> PassReport:
    context = PassContext(
        work_dir=folder, target_backend="openvino", calibration=Outliers(seed=2), judge=judge
    )
    return passes.get(name).run(model, folder / "out.onnx", dict(config), context)


def _auto_verdict(model: Path, variant: Path) -> tuple[bool, str]:
    report = accuracy_report(model, variant, Outliers(seed=1), candidate_backend="openvino")
    return within_budget(report, AccuracyBudget(), precision="int8")


def test_plain_nncf_int8_breaks_the_judge_and_the_controlled_one_keeps_it(
    outlier_model: Path, tmp_path: Path
) -> None:
    plain = _quantized(outlier_model, tmp_path / "plain", "int8_nncf_ov", None)
    kept = _quantized(outlier_model, tmp_path / "ac", "int8_nncf_ov_ac", _judge(outlier_model))

    assert _auto_verdict(outlier_model, plain.output)[0] is False
    within, note = _auto_verdict(outlier_model, kept.output)
    assert within, note
    assert plain.details["quantized_nodes"] == {"MatMul": 2}
    assert kept.details["quantized_nodes"] == {"MatMul": 1}  # one reverted, one kept in INT8
    assert kept.output.suffix == ".xml" and kept.details["judge"].startswith("within budget")
    assert kept.details["worst_cosine_float_then_int8"] == [1.0, 0.0]
    assert kept.details["worst_cosine_kept"] > 0.9  # the budget holds the mean at 0.99


def test_a_budget_no_reversion_within_the_cap_meets_is_not_applicable(
    outlier_model: Path, tmp_path: Path
) -> None:
    strict = _judge(outlier_model, AccuracyBudget(min_cosine=0.999999))

    with pytest.raises(GraphNotApplicable, match="could not be made on this model") as caught:
        _quantized(outlier_model, tmp_path, "int8_nncf_ov_ac", strict, max_iterations=1)
    assert "at most 1 iterations" in caught.value.message
    assert "min_cosine" in caught.value.message or "cosine" in caught.value.message


def test_outside_an_optimization_run_it_says_it_needs_the_runs_judge(
    outlier_model: Path, tmp_path: Path
) -> None:
    with pytest.raises(PassFailed, match="run's judge") as caught:
        _quantized(outlier_model, tmp_path, "int8_nncf_ov_ac", None)
    assert "int8_nncf_ov" in (caught.value.hint or "")


def test_a_search_past_its_time_limit_is_not_applicable_and_says_so(
    outlier_model: Path, tmp_path: Path
) -> None:
    judge = _judge(outlier_model)

    with pytest.raises(GraphNotApplicable, match="within the pass's time limit") as caught:
        _quantized(outlier_model, tmp_path, "int8_nncf_ov_ac", judge, time_limit_s=1e-6)
    assert "time_limit_s" in (caught.value.hint or "")
