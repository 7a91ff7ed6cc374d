"""The batching tuner's requests follow the user's request shape, values and arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from optistudio.core.batching import latency_profile as profile_module
from optistudio.core.batching.latency_profile import measure_latency_profile
from optistudio.core.batching.specs import BatchingVerifySpec, LatencyProfileSpec
from optistudio.core.batching.verify import request_feeds
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.model.samples import build_sample


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_sample("tiny_mlp_tokens", tmp_path_factory.mktemp("tokens"))


def test_requests_have_one_row_of_the_request_shape_and_the_values(tokens: Path) -> None:
    feeds = request_feeds(
        tokens, ModelInputs(shapes={"input_ids": [1, 9]}, values={"input_ids": 7}), 2
    )

    for request in feeds:
        assert request["input_ids"].shape == (1, 9) and (request["input_ids"] == 7).all()
        assert request["attention_mask"].shape == (1, 9)


def test_requests_are_the_arrays_of_an_inputs_file(tokens: Path, tmp_path: Path) -> None:
    ids = np.array([[3, 1, 4, 1, 5]], np.int64)
    np.savez(tmp_path / "request.npz", input_ids=ids, attention_mask=np.ones_like(ids))

    feeds = request_feeds(tokens, ModelInputs(inputs_file=str(tmp_path / "request.npz")), count=2)

    assert all(np.array_equal(request["input_ids"], ids) for request in feeds)


def test_the_profile_times_each_batch_of_the_request_shape(tokens: Path, monkeypatch) -> None:
    seen: dict[int, tuple[int, ...]] = {}
    timed = profile_module.interleaved_runs

    def spy(model, feeds, **kwargs):
        seen.update({size: batch["input_ids"].shape for size, batch in feeds.items()})
        return timed(model, feeds, **kwargs)

    monkeypatch.setattr(profile_module, "interleaved_runs", spy)

    measure_latency_profile(
        tokens,
        max_batch_size=4,
        inputs=ModelInputs(shapes={"input_ids": [1, 9]}),
        min_runs=2,
        min_seconds=0,
        probe_time_scale=0.25,  # what the profile does, not its figures
    )

    assert seen == {1: (1, 9), 2: (2, 9), 4: (4, 9)}


@pytest.mark.parametrize("spec_class", [LatencyProfileSpec, BatchingVerifySpec])
def test_batching_specs_take_the_input_fields(spec_class: type) -> None:
    extra = {"rate": 10.0} if spec_class is BatchingVerifySpec else {}

    spec = spec_class(dims={"sequence": 9}, values={"x": 1.0}, inputs_file="r.npz", **extra)

    assert (spec.dims, spec.values, spec.inputs_file) == ({"sequence": 9}, {"x": 1.0}, "r.npz")
