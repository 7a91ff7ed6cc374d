"""A one-channel Sigmoid map is read as what the graph shows: a text map when it is the model's
one map, a CenterNet-style heatmap beside its other maps; the input image's size only when the
dims say so. CenterFace, its dims freed, read "the size of the input image: a DB-style
text-detection probability map" for a face heatmap at a quarter of the frame."""

from __future__ import annotations

from pathlib import Path

from evaluator_graphs import probability_map_model, save, tensor, weight
from onnx import helper

from optistudio.core.numerics.evaluators.recognize import model_facts, read_task


def centernet_heads(path: Path) -> Path:
    """x [N, 3, H, W] -> Conv stride 4 -> Sigmoid heatmap [N, 1, h, w] and a scale map
    [N, 2, h, w] beside it, their dims named apart from the input's (as free dims names them)."""
    nodes = [
        helper.make_node("Conv", ["x", "Wf"], ["f"], strides=[4, 4]),
        helper.make_node("Relu", ["f"], ["r"]),
        helper.make_node("Conv", ["r", "Wh"], ["h"]),
        helper.make_node("Sigmoid", ["h"], ["heatmap"]),
        helper.make_node("Conv", ["r", "Ws"], ["scale"]),
    ]
    return save(
        path,
        nodes,
        [tensor("x", ["N", 3, "height", "width"])],
        [
            tensor("heatmap", ["N", 1, "heatmap_2", "heatmap_3"]),
            tensor("scale", ["N", 2, "scale_2", "scale_3"]),
        ],
        initializers=[
            weight("Wf", (8, 3, 4, 4)),
            weight("Wh", (1, 8, 1, 1)),
            weight("Ws", (2, 8, 1, 1)),
        ],
    )


def _reason(path: Path) -> tuple[str, str]:
    found = read_task(model_facts(path)).found
    assert found is not None
    return found[1].task, found[1].reason


def test_a_heatmap_beside_other_maps_is_no_text_map(tmp_path: Path) -> None:
    task, reason = _reason(centernet_heads(tmp_path / "centerface.onnx"))

    assert task == "detection_map"
    assert "a heatmap beside 1 other map(s) (scale): a CenterNet-style detector's" in reason
    assert "text" not in reason
    assert "its height and width open" in reason
    assert "the size of the input image" not in reason


def test_the_one_map_of_a_text_detector_is_still_a_text_map(tmp_path: Path) -> None:
    task, reason = _reason(probability_map_model(tmp_path / "det.onnx"))

    assert task == "detection_map"
    assert reason.endswith("a DB-style text-detection probability map")
    assert "a heatmap beside" not in reason
