from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.errors import Cancelled, PassFailed
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import AccuracyBudget, accuracy_report, within_budget
from optistudio.core.numerics.sensitivity import layer_errors
from optistudio.core.passes.base import PassContext, passes
from optistudio.core.passes.mixed import INT8_MIXED, MixedPrecisionConfig, run_int8_mixed
from optistudio.core.passes.quantize import Int8StaticConfig, run_int8_static

COSINE_ONLY = {"min_cosine": 0.99, "max_top1_drop": None}


def _mlp(path: Path, *, sensitive: bool = True, named: bool = True) -> Path:
    """fc1 -> Relu -> fc2 -> Relu -> fc3 -> fc4, 16 -> 32 -> 32 -> 32 -> 8.

    With `sensitive`, fc2's first weight row is 100 in every column while the feature it reads
    (fc1's column 0) is ~1e-4: it barely matters in float, but it sets every column's INT8 scale
    to 100 / 127, which rounds all the other weights (|w| ~ 0.2) to 0 or +-0.8.
    """
    rng = np.random.default_rng(0)
    shapes = {"w1": (16, 32), "w2": (32, 32), "w3": (32, 32), "w4": (32, 8)}
    weights = {
        name: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
        for name, shape in shapes.items()
    }
    if sensitive:
        weights["w1"][:, 0] *= 1e-4
        weights["w2"][0, :] = 100.0
    layers = [
        ("MatMul", ["x", "w1"], "m1", "fc1"),
        ("Relu", ["m1"], "r1", "relu1"),
        ("MatMul", ["r1", "w2"], "m2", "fc2"),
        ("Relu", ["m2"], "r2", "relu2"),
        ("MatMul", ["r2", "w3"], "m3", "fc3"),
        ("MatMul", ["m3", "w4"], "y", "fc4"),
    ]
    nodes = [
        helper.make_node(op, inputs, [output], name=name if named else "")
        for op, inputs, output, name in layers
    ]
    graph = helper.make_graph(
        nodes,
        "sensitive_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8])],
        initializer=[numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


@pytest.fixture
def sensitive(tmp_path: Path) -> Path:
    return _mlp(tmp_path / "sensitive.onnx")


def _data(model: Path) -> SyntheticDataset:
    return SyntheticDataset(inspect_model(model).inputs, samples=64, batch_size=8)


def _context(tmp_path: Path, model: Path, **kwargs) -> PassContext:
    return PassContext(work_dir=tmp_path / "work", calibration=_data(model), **kwargs)


def _mixed(model: Path, tmp_path: Path, **config) -> tuple[Path, dict, list[str]]:
    out = tmp_path / "mixed.onnx"
    settings = MixedPrecisionConfig.model_validate({"budget": COSINE_ONLY, **config})
    report = run_int8_mixed(model, out, settings, _context(tmp_path, model))
    return report.output, report.details, report.warnings


@pytest.fixture
def int8(sensitive: Path, tmp_path: Path) -> Path:
    out = tmp_path / "int8.onnx"
    run_int8_static(sensitive, out, Int8StaticConfig(), _context(tmp_path, sensitive))
    return out


# --- per-layer error -----------------------------------------------------------------------------


def test_layer_errors_rank_the_sensitive_node_first(sensitive: Path, int8: Path, tmp_path):
    errors = layer_errors(sensitive, int8, _data(sensitive), work_dir=tmp_path / "s")

    worst = errors[0]
    assert (worst.node, worst.op_type, worst.quantized_node) == ("relu2", "Relu", "fc2")
    assert worst.sqnr_db < 5 and worst.samples == 64
    assert errors[-1].noise_added < worst.noise_added / 5
    first_layer = next(error for error in errors if error.tensor == "r1")
    assert first_layer.sqnr_db > 30 and first_layer.cosine > 0.999


def test_raw_sqnr_order_is_also_available(sensitive: Path, int8: Path, tmp_path):
    by_sqnr = layer_errors(sensitive, int8, _data(sensitive), work_dir=tmp_path / "s", order="sqnr")
    by_noise = layer_errors(sensitive, int8, _data(sensitive), work_dir=tmp_path / "t")

    assert [error.sqnr_db for error in by_sqnr] == sorted(error.sqnr_db for error in by_sqnr)
    assert [e.noise_added for e in by_noise] == sorted(
        (e.noise_added for e in by_noise), reverse=True
    )
    assert {error.tensor for error in by_sqnr} == {error.tensor for error in by_noise}


def test_tensors_are_matched_by_float_name_through_the_folded_relu(sensitive, int8, tmp_path):
    producers = {out: node.name for node in onnx.load(int8).graph.node for out in node.output}
    errors = layer_errors(sensitive, int8, _data(sensitive), work_dir=tmp_path / "s")

    assert producers["r1"] == "fc1"  # the quantizer dropped relu1 and kept its output's name
    assert {error.tensor for error in errors} == {"r1", "r2", "m3", "y"}  # m1, m2 are gone
    assert not list((tmp_path / "s").iterdir())


# --- int8_mixed ----------------------------------------------------------------------------------


def test_plain_int8_static_misses_the_budget(sensitive: Path, int8: Path) -> None:
    report = accuracy_report(sensitive, int8, _data(sensitive))

    ok, note = within_budget(report, AccuracyBudget.model_validate(COSINE_ONLY))
    assert not ok and report.mean_cosine < 0.9, note


def test_fallback_meets_a_budget_that_plain_int8_misses(sensitive: Path, tmp_path: Path) -> None:
    out, details, warnings = _mixed(sensitive, tmp_path)

    assert details["met_budget"] and details["stopped"] == "budget met"
    assert details["fp32_nodes"] == ["fc2"]
    assert [t["within_budget"] for t in details["trials"]] == [False, True]
    assert [t["excluded"] for t in details["trials"]] == [[], ["fc2"]]
    assert all(t["seconds"] > 0 for t in details["trials"])
    assert details["ranking"][0]["quantized_node"] == "fc2"
    assert details["quantized_nodes"] == {"MatMul": 3}
    assert warnings == []
    check = accuracy_report(sensitive, out, _data(sensitive))
    assert check.mean_cosine >= 0.99


def test_a_model_within_budget_needs_one_trial(tmp_path: Path) -> None:
    model = _mlp(tmp_path / "benign.onnx", sensitive=False)

    _, details, _ = _mixed(model, tmp_path)

    assert details["met_budget"] and details["fp32_nodes"] == []
    assert len(details["trials"]) == 1 and details["ranking"] == []


def test_unnamed_nodes_are_named_so_they_can_stay_in_fp32(tmp_path: Path) -> None:
    model = _mlp(tmp_path / "unnamed.onnx", named=False)

    _, details, _ = _mixed(model, tmp_path)

    assert details["met_budget"] and details["fp32_nodes"] == ["MatMul_2"]


def test_an_unmeetable_budget_keeps_the_best_variant(sensitive: Path, tmp_path: Path) -> None:
    budget = {"min_cosine": 0.999999, "max_top1_drop": None}

    out, details, warnings = _mixed(sensitive, tmp_path, budget=budget, max_trials=2)

    cosines = [trial["mean_cosine"] for trial in details["trials"]]
    assert not details["met_budget"] and details["stopped"] == "max_trials reached"
    assert len(cosines) == 2 and details["trials"][details["chosen_trial"]]["mean_cosine"] == max(
        cosines
    )
    assert details["fp32_nodes"] == ["fc2"] and out.is_file()
    assert any("No variant met the accuracy budget" in warning for warning in warnings)


def test_the_time_limit_stops_the_search_with_a_warning(sensitive: Path, tmp_path: Path) -> None:
    _, details, warnings = _mixed(sensitive, tmp_path, time_limit_s=0.001)

    assert details["stopped"] == "time limit" and len(details["trials"]) == 1
    assert any("time limit" in warning for warning in warnings)


def test_cancellation_propagates(sensitive: Path, tmp_path: Path) -> None:
    def cancel(fraction: float, message: str) -> None:
        if message.startswith("trial 1"):
            raise Cancelled("job cancelled")

    settings = MixedPrecisionConfig.model_validate({"budget": COSINE_ONLY})
    context = _context(tmp_path, sensitive, progress=cancel)
    with pytest.raises(Cancelled):
        run_int8_mixed(sensitive, tmp_path / "out.onnx", settings, context)


def test_it_needs_calibration_data(sensitive: Path, tmp_path: Path) -> None:
    context = PassContext(work_dir=tmp_path / "work")
    with pytest.raises(PassFailed, match="calibration data"):
        run_int8_mixed(sensitive, tmp_path / "out.onnx", MixedPrecisionConfig(), context)


@pytest.mark.parametrize(
    "config",
    [{"max_trail": 3}, {"budget": {"min_cosin": 0.9}}, {"max_trials": 0}],
    ids=["misspelt-field", "misspelt-budget-field", "no-trials"],
)
def test_config_rejects_bad_options(config: dict) -> None:
    with pytest.raises(ValidationError):
        MixedPrecisionConfig.model_validate(config)


def test_registered_and_runs_through_the_registry(sensitive: Path, tmp_path: Path) -> None:
    names = {ep.name: ep.value for ep in entry_points(group="optistudio.passes")}
    info = passes.get("int8_mixed")

    report = info.run(
        sensitive, tmp_path / "out.onnx", {"budget": COSINE_ONLY}, _context(tmp_path, sensitive)
    )

    assert names["int8_mixed"] == "optistudio.core.passes.mixed:INT8_MIXED" and info == INT8_MIXED
    assert info.needs_calibration and info.produces_precision == "mixed"
    assert report.details["fp32_nodes"] == ["fc2"] and report.output.is_file()
    assert not (tmp_path / "work" / "int8_mixed").exists()
