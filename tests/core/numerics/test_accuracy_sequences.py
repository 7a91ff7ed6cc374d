"""Accuracy of a variant whose model answers with a sequence of maps (scikit-learn's ZipMap):
compared as [samples, classes] in class order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from export_models import zipmap_model

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import accuracy_report
from optistudio.core.numerics.compared_model import as_array as _as_array


def test_a_zipmap_model_is_compared_with_itself(tmp_path: Path) -> None:
    model = zipmap_model(tmp_path / "forest.onnx")
    data = SyntheticDataset(inspect_model(model).inputs, samples=4)

    report = accuracy_report(model, model, data)

    assert report.samples == 4
    assert report.per_output_max_abs_error == {"label": 0.0, "probabilities": 0.0}


def test_maps_become_rows_in_class_order() -> None:
    rows = [{1: 0.25, 0: 0.75}, {0: 0.5, 1: 0.5}]

    assert _as_array("probabilities", rows).tolist() == [[0.75, 0.25], [0.5, 0.5]]
    assert _as_array("logits", np.ones(2)).tolist() == [1.0, 1.0]
