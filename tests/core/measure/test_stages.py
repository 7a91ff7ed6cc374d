from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from diagnostic_models import build_cnn, quantize_cnn
from PIL import Image

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.diagnose.layer_report import layer_error_rows
from optistudio.core.errors import DataMismatch
from optistudio.core.measure.stages import PipelineSpec, layered_breakdown, postprocess
from optistudio.core.model.intake import inspect_model


def test_breakdown_times_each_declared_stage(tmp_path: Path) -> None:
    cnn = build_cnn(tmp_path / "cnn.onnx")
    spec = PipelineSpec(
        batch_size=2,
        runs=3,
        image_preprocessing=ImagePreprocessing(size=(16, 16)),
        postprocessing=["softmax", "top5"],
    )

    breakdown = layered_breakdown(cnn, spec, work_dir=tmp_path / "work")

    assert [s.stage for s in breakdown.stages] == ["pre-processing", "inference", "post-processing"]
    assert all(s.ms > 0 for s in breakdown.stages)
    assert abs(sum(s.share for s in breakdown.stages) - 1) < 1e-9
    assert "synthetic PNGs" in breakdown.stages[0].detail
    assert breakdown.notes == []


def test_breakdown_uses_the_users_images_and_says_what_was_not_declared(tmp_path: Path) -> None:
    cnn = build_cnn(tmp_path / "cnn.onnx")
    (tmp_path / "imgs").mkdir()
    Image.new("RGB", (32, 20), (10, 20, 30)).save(tmp_path / "imgs" / "a.png")
    spec = PipelineSpec(
        runs=2, image_preprocessing=ImagePreprocessing(size=(16, 16)), images=str(tmp_path / "imgs")
    )

    breakdown = layered_breakdown(cnn, spec, work_dir=tmp_path / "work")

    assert "your images" in breakdown.stages[0].detail
    assert breakdown.notes == ["No post-processing declared."]


def test_image_preprocessing_for_a_model_that_takes_no_images_is_refused(
    tmp_path: Path, tiny_model: Path
) -> None:
    spec = PipelineSpec(runs=1, image_preprocessing=ImagePreprocessing(size=(16, 16)))

    with pytest.raises(DataMismatch):
        layered_breakdown(tiny_model, spec, work_dir=tmp_path)


def test_postprocess_steps() -> None:
    logits = np.array([[1.0, 3.0, 2.0, 0.0, -1.0, 5.0]])

    probabilities = postprocess(logits, ["softmax"])

    assert np.allclose(probabilities.sum(axis=-1), 1.0)
    assert postprocess(logits, ["argmax"]).tolist() == [5]
    assert postprocess(logits, ["top5"]).tolist() == [[5, 1, 2, 0, 3]]
    assert np.allclose(postprocess(np.zeros(2), ["sigmoid"]), 0.5)


def test_layer_error_rows_link_each_layer_to_the_float_graph(tmp_path: Path) -> None:
    cnn = build_cnn(tmp_path / "cnn.onnx")
    qdq = quantize_cnn(cnn, tmp_path / "qdq.onnx", mode="static")
    data = SyntheticDataset(inspect_model(cnn).inputs, samples=4, batch_size=2)

    rows = layer_error_rows(cnn, qdq, data, work_dir=tmp_path / "work")

    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    by_node = {r["node"]: r for r in rows}
    assert by_node["conv2"]["graph_index"] == 2
    assert by_node["conv2"]["fed_by"] == ["relu1"]
    assert by_node["relu1"]["quantized_node"] == "conv1"  # the quantizer folded the Relu
    assert all(-200 <= r["sqnr_db"] <= 200 and -1 <= r["cosine"] <= 1 for r in rows)
