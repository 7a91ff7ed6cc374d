"""Auto makes int8_placed after its candidates when full static INT8 on ONNX Runtime did not
pay, and only then (optistudio.core.optimize.run._add_placement)."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.measure.compare import FASTER, SLOWER, ComparisonSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.run import Judging, Making, OptimizeSpec, _add_placement
from optistudio.core.optimize.spec import UnsteadyTiming
from optistudio.core.progress import ignore_progress
from tests.conftest import build_matmul_model
from tests.core.optimize.test_placement_offer import judged

QUICK = ComparisonSpec(min_pairs=4, min_seconds=0.1, max_seconds=1.0, threads=1)


def making(tmp_path: Path) -> Making:
    model = build_matmul_model(tmp_path / "m.onnx")
    info = inspect_model(model)
    spec = OptimizeSpec(
        comparison=QUICK, unsteady_timing=UnsteadyTiming(candidate_seconds=0, job_seconds=0)
    )
    source = spec.dataset(info.inputs, samples=8)
    return Making(model, info, spec, tmp_path / "out", Judging(source, None, None, None))


@pytest.mark.parametrize("recipes", [["auto"], ["int8_static"]], ids=["auto", "named"])
def test_placed_int8_follows_static_int8_that_did_not_pay_in_auto_only(
    tmp_path: Path, recipes: list[str]
) -> None:
    made = making(tmp_path)
    spec = OptimizeSpec(recipes=recipes, target_backend="any")
    variants = [judged("int8_static", SLOWER)]
    _add_placement(made, spec, [variants[0].recipe], variants, ignore_progress)
    if recipes == ["auto"]:
        assert [v.recipe.name.split("@")[0] for v in variants] == ["int8_static", "int8_placed"]
        placed = variants[-1]
        assert placed.status in ("made", "not_applicable")  # tried: made, or said why not
        assert placed.backend == "onnxruntime"
    else:
        assert len(variants) == 1


def test_static_int8_that_paid_needs_no_placement(tmp_path: Path) -> None:
    made = making(tmp_path)
    variants = [judged("int8_static", FASTER)]
    _add_placement(
        made, OptimizeSpec(recipes=["auto"]), [variants[0].recipe], variants, ignore_progress
    )
    assert len(variants) == 1
