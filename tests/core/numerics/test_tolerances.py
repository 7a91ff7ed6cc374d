"""One tolerance rule per precision: bench's output check and optimize's judge give the same
verdict on the same outputs, and both say which rule they held."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import AccuracyBudget, accuracy_report, within_budget
from optistudio.core.numerics.crosscheck import check_outputs, reference_outputs
from optistudio.core.numerics.tolerances import RULES, rule_for


def head(path: Path, scale: float) -> Path:
    """y = scale * (x @ W + b) with a large bias: every sample's output has about the same
    energy, so a scale of 1.08 is a worst-sample SNR of about 22 dB against scale 1."""
    w = np.full((8, 10), 0.01, np.float32)
    b = np.linspace(9.0, 11.0, 10, dtype=np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["m"]),
            helper.make_node("Add", ["m", "b"], ["a"]),
            helper.make_node("Mul", ["a", "s"], ["y"]),
        ],
        "head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
        [
            numpy_helper.from_array(w, "W"),
            numpy_helper.from_array(b, "b"),
            numpy_helper.from_array(np.array(scale, np.float32), "s"),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(
    ("precision", "agrees"),
    [("fp32", False), ("fp16", False), ("bf16", True), ("int8", True), ("int8+bf16", True)],
)
def test_bench_and_optimize_agree_on_one_rule_per_precision(
    tmp_path: Path, precision: str, agrees: bool
) -> None:
    original, variant = head(tmp_path / "a.onnx", 1.0), head(tmp_path / "b.onnx", 1.08)
    feeds = {"x": np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)}
    data = SyntheticDataset(inspect_model(original).inputs, samples=8, batch_size=4)

    bench = check_outputs(
        ["y"], reference_outputs(original, feeds), reference_outputs(variant, feeds),
        precision=precision,
    )  # fmt: skip
    judged, note = within_budget(
        accuracy_report(original, variant, data), AccuracyBudget(), precision=precision
    )

    rule = rule_for(precision).name
    assert bench.passed is agrees and judged is agrees
    assert rule in bench.verdict() and rule in note
    assert bench.verdict().startswith("agree within" if agrees else "DISAGREE")


def test_a_mixed_precision_takes_its_loosest_part_and_int4_the_int8_rule() -> None:
    assert rule_for("int8+bf16") == RULES["int8"] and rule_for("int4") == RULES["int8"]
    assert rule_for("mixed") == RULES["int8"]  # int8_placed: INT8 where it pays, FP32 elsewhere
    assert rule_for("BF16") == RULES["bf16"]
    floors = [RULES[p].min_snr_db for p in ("fp32", "fp16", "bf16", "int8")]
    assert floors == sorted(floors, reverse=True)  # each precision looser than the one above


def test_a_budget_with_its_floor_off_switches_the_rule_off_too(tmp_path: Path) -> None:
    original, variant = head(tmp_path / "a.onnx", 1.0), head(tmp_path / "b.onnx", 1.08)
    data = SyntheticDataset(inspect_model(original).inputs, samples=8, batch_size=4)
    report = accuracy_report(original, variant, data)

    off, _ = within_budget(report, AccuracyBudget(floor_snr_db=None), precision="fp32")

    assert off
