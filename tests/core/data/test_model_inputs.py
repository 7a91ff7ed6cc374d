"""ModelInputs: the one value every model-running spec is, read back from stored JSON as it was."""

from __future__ import annotations

import numpy as np

from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.model.info import TensorSpec
from optistudio.services.jobkinds import JOB_KINDS

SPECS = [TensorSpec(name="x", dtype="float32", shape=["batch", 3, "side", "side"])]


def test_every_job_kind_that_feeds_a_model_embeds_the_one_value() -> None:
    feeding = [info.spec for info in JOB_KINDS.values() if "shapes" in info.spec.model_fields]

    assert len(feeding) >= 8
    for spec in feeding:
        assert issubclass(spec, ModelInputs), spec.__name__
        assert set(ModelInputs.FIELDS) <= set(spec.model_fields), spec.__name__


def test_a_spec_stored_with_flat_fields_reads_back_and_keeps_them_flat() -> None:
    stored = {"shapes": {"x": [1, 3, 64, 64]}, "dims": {"side": 64}, "batch_sizes": [2]}

    spec = BenchmarkSpec.model_validate(stored)

    assert spec.model_inputs == ModelInputs(shapes={"x": [1, 3, 64, 64]}, dims={"side": 64})
    assert spec.model_dump()["shapes"] == stored["shapes"]  # not nested under a new key
    assert "batch_sizes" not in spec.model_inputs.model_dump()
    assert ModelInputs().given() is False and spec.given() is True


def test_feeds_follow_the_value_and_the_batch() -> None:
    inputs = ModelInputs(dims={"side": 8}, values={"x": 0.5})

    feeds, warnings = inputs.feeds(SPECS, batch_size=3)
    user, batch, _ = inputs.user_feeds(SPECS, batch_size=2)
    dataset = inputs.dataset(SPECS, samples=4, batch_size=2)

    assert feeds["x"].shape == (3, 3, 8, 8) and np.all(feeds["x"] == 0.5) and warnings == []
    assert user["x"].shape == (2, 3, 8, 8) and batch == 2
    assert [b["x"].shape for b in dataset.batches()] == [(2, 3, 8, 8)] * 2
