"""ov_static: the model as an OpenVINO IR fixed at the run's input shapes, which the OpenVINO
backend runs at those shapes and, reshaped, at any other; Auto's offer of it after its pick."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from optistudio.core.backends import get_backend
from optistudio.core.backends.base import SessionOptions
from optistudio.core.backends.openvino_static import SPECIALIZED, ReshapedOpenVinoModel
from optistudio.core.errors import PassFailed
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.making import made_file
from optistudio.core.optimize.recipes import BUILTIN_RECIPES, on_backend
from optistudio.core.optimize.static_offer import offer_static_shapes, static_recipe
from optistudio.core.optimize.variant import VariantResult
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.ov_static import StaticShapesConfig, run_ov_static
from optistudio.core.passes.prepare import GraphNotApplicable
from tests.core.passes.test_nncf import INPUT_SHAPE, RandomImages, build_cnn

ov = pytest.importorskip("openvino")
BATCH = 8
"""RandomImages' batch: the shape the run feeds first."""


def _fixed(model: Path, folder: Path) -> Path:
    context = PassContext(work_dir=folder, calibration=RandomImages(batches=1))
    report = run_ov_static(model, folder / "out.onnx", StaticShapesConfig(), context)
    assert report.details["static_shapes"] == {"x": [BATCH, *INPUT_SHAPE]}
    return report.output


def _feeds(batch: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(batch)
    return {"x": rng.standard_normal((batch, *INPUT_SHAPE)).astype(np.float32)}


def test_the_ir_is_fixed_at_the_runs_first_batch_and_marked_so(tmp_path: Path) -> None:
    ir = _fixed(build_cnn(tmp_path), tmp_path)

    graph = ov.Core().read_model(str(ir))
    assert ir.suffix == ".xml" and ir.with_suffix(".bin").is_file()
    assert not graph.is_dynamic()
    assert list(graph.inputs[0].get_shape()) == [BATCH, *INPUT_SHAPE]
    assert graph.has_rt_info(SPECIALIZED)


@pytest.mark.parametrize("batch", [BATCH, 3])
def test_the_backend_runs_it_at_its_shapes_and_reshaped_at_others(
    tmp_path: Path, batch: int
) -> None:
    model = build_cnn(tmp_path)
    ir = _fixed(model, tmp_path)
    feeds = _feeds(batch)
    expected = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, feeds
    )[0]

    loaded = get_backend("openvino").load(ir, SessionOptions(threads=1))
    try:
        [got] = loaded.run(feeds)
    finally:
        loaded.close()

    assert isinstance(loaded, ReshapedOpenVinoModel)
    assert got.shape == (batch, 4)
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)
    assert "fixed at the input shapes x=[8, 3, 16, 16]" in loaded.details["dynamic_shapes"]
    assert loaded.details["inference_precision"] == "fp32"


def test_a_model_with_static_inputs_is_not_applicable(tmp_path: Path) -> None:
    model = build_cnn(tmp_path, batch=BATCH)

    with pytest.raises(GraphNotApplicable, match="no dynamic dim"):
        _fixed(model, tmp_path)


def test_without_the_runs_inputs_the_pass_says_what_it_needs(tmp_path: Path) -> None:
    context = PassContext(work_dir=tmp_path)

    with pytest.raises(PassFailed, match="needs the run's inputs"):
        run_ov_static(build_cnn(tmp_path), tmp_path / "o.onnx", StaticShapesConfig(), context)


def _made(name: str, backend: str, path: str) -> VariantResult:
    recipe = on_backend(BUILTIN_RECIPES[name], backend)
    return VariantResult(recipe=recipe, precision="fp32", backend=backend, path=path, status="made")


def test_auto_offers_its_openvino_pick_fixed_when_the_model_has_a_dynamic_dim(
    tmp_path: Path,
) -> None:
    info = inspect_model(build_cnn(tmp_path))
    pick = _made("bf16", "openvino", str(tmp_path / "model.onnx"))

    offered = offer_static_shapes(pick, [pick], info)

    assert offered is not None
    assert offered.name == "bf16_static@openvino" and offered.precision == "bf16"
    assert [s.step for s in offered.steps] == ["ov_static"]
    quantized = _made("int8_nncf_ov_bf16", "openvino", str(tmp_path / "model.xml"))
    assert [s.step for s in static_recipe(quantized.recipe).steps] == ["int8_nncf_ov", "ov_static"]


def test_no_offer_off_openvino_for_static_inputs_or_twice(tmp_path: Path) -> None:
    (tmp_path / "static").mkdir()
    dynamic = inspect_model(build_cnn(tmp_path))
    static = inspect_model(build_cnn(tmp_path / "static", batch=BATCH))
    on_ort = _made("graph", "onnxruntime", str(tmp_path / "model.onnx"))
    on_ov = _made("bf16", "openvino", str(tmp_path / "model.onnx"))
    already = VariantResult(
        recipe=static_recipe(on_ov.recipe),
        precision="bf16",
        backend="openvino",
        path="x.xml",
        status="made",
    )

    assert offer_static_shapes(None, [], dynamic) is None
    assert offer_static_shapes(on_ort, [on_ort], dynamic) is None
    assert offer_static_shapes(on_ov, [on_ov], static) is None
    assert offer_static_shapes(on_ov, [on_ov, already], dynamic) is None


def test_the_static_ir_is_made_from_the_picks_own_file(tmp_path: Path) -> None:
    """The offered recipe runs only its new step, on the pick's file: the pick's steps come
    first, marked with the recipe that made that file, and the precision is the passes'."""
    model = build_cnn(tmp_path)
    pick = made_file(model, BUILTIN_RECIPES["fp32"], tmp_path / "out", _context(tmp_path), None)
    earlier = VariantResult(
        recipe=on_backend(BUILTIN_RECIPES["fp32"], "openvino"),
        precision="fp32",
        backend="openvino",
        path=str(pick[0]),
        status="made",
    )
    offered = static_recipe(earlier.recipe)

    path, steps, precision = made_file(
        model, offered, tmp_path / "out", _context(tmp_path), earlier
    )

    assert path.suffix == ".xml" and path.parent.name == offered.name
    assert [s.step for s in steps] == ["ov_static"] and precision == "fp32"
    assert ov.Core().read_model(str(path)).has_rt_info(SPECIALIZED)


def _context(folder: Path) -> PassContext:
    return PassContext(work_dir=folder / "work", calibration=RandomImages(batches=1))
