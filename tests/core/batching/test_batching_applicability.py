"""Why batching does not apply, said in the model's own terms: a sequence output is no tensor,
and an output whose dim 0 is not one row per request names that output."""

from __future__ import annotations

from pathlib import Path

import pytest
from export_models import rows_not_batch_model, zipmap_model

from optistudio.core.batching.applicability import batch_dim_problem
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model


def test_a_sequence_output_is_named_as_a_sequence(tmp_path: Path) -> None:
    problem = batch_dim_problem(inspect_model(zipmap_model(tmp_path / "forest.onnx")))

    assert problem is not None
    assert "'probabilities' is a sequence, not a tensor" in problem
    assert "scalar" not in problem


def test_an_output_that_is_not_one_row_per_request_is_the_reason(tmp_path: Path) -> None:
    model = rows_not_batch_model(tmp_path / "rows.onnx")

    with pytest.raises(InvalidSpec, match="No request was served: .*cannot be split back") as e:
        measure_latency_profile(model, max_batch_size=2, min_runs=2, min_seconds=0.0)

    assert "lower the rate" not in e.value.message
