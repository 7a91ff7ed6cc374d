"""Free the declared dims a graph does not need: verified on graphs built in code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from optistudio.core.errors import PassFailed
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.dims_rewrite import reshape_target
from optistudio.core.passes.free_dims import FreeDimsConfig, free_declared_dims, run_free_dims
from tests.core.passes.free_dims_models import baked_reshape, flatten_gemm, fully_convolutional

FRAME = {"x": [1, 3, 480, 640]}


def _dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]


def _run(path: Path, shape: list[int]) -> dict[str, np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    return {
        o.name: v for o, v in zip(session.get_outputs(), session.run(None, {"x": x}), strict=True)
    }


def test_a_fully_convolutional_graph_declared_at_10x3x32x32_runs_whole_frames(
    tmp_path: Path,
) -> None:
    source = fully_convolutional(tmp_path / "fcn.onnx")

    freed = free_declared_dims(source, tmp_path / "free.onnx", shapes=FRAME)

    assert freed.freed == {"x": {0: "batch", 2: "height", 3: "width"}}
    assert _dims(freed.model.graph.input[0]) == ["batch", 3, "height", "width"]
    assert [_dims(o)[:2] for o in freed.model.graph.output] == [["batch", 8], ["batch", 2]]
    out = _run(tmp_path / "free.onnx", [1, 3, 480, 640])
    assert out["heat"].shape == (1, 2, 120, 160)  # the 32x32 head's 8x8, scaled by 15 and 20
    assert freed.check.sizes[1] == FRAME and freed.check.max_abs_error == 0.0
    assert "480" in freed.line() and "row for row" in freed.line()


def test_the_rewrite_gives_the_files_outputs_at_its_declared_shape(tmp_path: Path) -> None:
    source = fully_convolutional(tmp_path / "fcn.onnx")
    free_declared_dims(source, tmp_path / "free.onnx")

    original, rewritten = (
        _run(source, [10, 3, 32, 32]),
        _run(tmp_path / "free.onnx", [10, 3, 32, 32]),
    )

    assert all(np.array_equal(original[name], rewritten[name]) for name in original)


def test_a_reshape_to_a_constant_derived_from_the_dims_is_derived(tmp_path: Path) -> None:
    source = baked_reshape(tmp_path / "anchors.onnx")

    freed = free_declared_dims(source, tmp_path / "free.onnx", shapes=FRAME)

    assert any("Reshape to [10, 8, 64]): [0, 8, -1]" in edit for edit in freed.edits)
    assert _run(tmp_path / "free.onnx", [1, 3, 480, 640])["anchors"].shape == (1, 120 * 160, 8)
    assert _dims(freed.model.graph.output[0]) == ["batch", "anchors_1", 8]


def test_without_the_fix_the_baked_reshape_would_not_run(tmp_path: Path) -> None:
    """The case the derivation exists for: only the declarations freed, the Reshape fails."""
    model = onnx.load(str(baked_reshape(tmp_path / "anchors.onnx")))
    for dim in model.graph.input[0].type.tensor_type.shape.dim:
        dim.dim_param = "free"
    onnx.save(model, str(tmp_path / "naive.onnx"))

    with pytest.raises(Exception, match="(?i)reshape"):
        _run(tmp_path / "naive.onnx", [1, 3, 480, 640])


def test_a_flatten_gemm_classifier_is_refused_for_height_and_width_in_one_sentence(
    tmp_path: Path,
) -> None:
    source = flatten_gemm(tmp_path / "classifier.onnx")

    with pytest.raises(PassFailed) as refused:
        free_declared_dims(source, tmp_path / "free.onnx", shapes=FRAME)

    assert refused.value.message == (
        "Input 'x' cannot run at 1x3x480x640: its graph needs 32x32 (dims 2, 3) as declared "
        "(node 'fc' (Gemm) fails at 1x3x480x32)."
    )
    assert "'x' dim 0" in (refused.value.hint or "")  # the batch can be freed


def test_the_classifiers_batch_is_freed_and_its_height_and_width_kept(tmp_path: Path) -> None:
    source = flatten_gemm(tmp_path / "classifier.onnx")

    freed = free_declared_dims(source, tmp_path / "free.onnx")

    assert freed.freed == {"x": {0: "batch"}}
    assert _dims(freed.model.graph.input[0]) == ["batch", 3, 32, 32]
    assert _run(tmp_path / "free.onnx", [5, 3, 32, 32])["logits"].shape == (5, 10)


def test_shapes_that_fit_the_declaration_have_nothing_to_free(tmp_path: Path) -> None:
    source = fully_convolutional(tmp_path / "fcn.onnx")

    with pytest.raises(PassFailed, match="nothing to free"):
        free_declared_dims(source, tmp_path / "free.onnx", shapes={"x": [10, 3, 32, 32]})


@pytest.mark.parametrize(
    ("target", "a", "b", "derived"),
    [
        ([10, 8, 64], [10, 8, 8, 8], [20, 8, 16, 16], [0, 8, -1]),
        ([1, 2048], [1, 8, 16, 16], [1, 8, 32, 32], [1, -1]),
        ([10, -1, 4], [10, 16, 16, 8], [20, 32, 32, 8], [0, -1, 4]),
        ([10, 8, 64], [10, 8, 8, 8], [10, 8, 8, 8], [10, 8, 64]),
    ],
    ids=["flattened-map", "flatten-to-features", "anchors-with-minus-one", "nothing-moves"],
)
def test_reshape_targets_follow_the_moving_dims(
    target: list[int], a: list[int], b: list[int], derived: list[int]
) -> None:
    assert reshape_target(target, a, b, "node") == derived


def test_a_target_whose_sizes_cannot_be_told_apart_is_refused() -> None:
    """An 8-channel 1x1 map (stride 32 at 32x32) reshaped to [4, 2]: which entry grows with
    the map, the 4 or the 2, no shape can tell."""
    with pytest.raises(PassFailed, match="cannot be derived"):
        reshape_target([4, 2], [8, 1, 1], [8, 2, 2], "node 'r' (Reshape to [4, 2])")


def test_the_pass_reports_its_edits_and_check(tmp_path: Path) -> None:
    source = baked_reshape(tmp_path / "anchors.onnx")

    report = run_free_dims(
        source, tmp_path / "out.onnx", FreeDimsConfig(), PassContext(work_dir=tmp_path)
    )

    assert report.details["freed"] == {"x": ["batch", "height", "width"]}
    assert "equal to the file at 10x3x32x32" in report.details["check"]
