"""`ModelInputs.over`: a spec with its model's input profile under it, validated as its class."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from optistudio.core.data.input_profile import InputProfile, propose_input_profile
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.model.info import TensorSpec
from optistudio.services.jobkinds import OptimizeJobSpec

TEXT_LINE = [TensorSpec(name="x", dtype="float32", shape=[None, 3, 48, None])]
"""A recognizer's input: batch, channels, 48 high, a free width (the profile guesses 320)."""


def test_the_profile_fills_what_the_spec_leaves_and_the_spec_keeps_its_class() -> None:
    job = BenchmarkSpec(batch_sizes=[1, 3], values={"x": 0.5})

    fed = job.over(propose_input_profile(TEXT_LINE), TEXT_LINE)

    assert type(fed) is BenchmarkSpec and fed.batch_sizes == [1, 3]
    assert fed.dims == {"x.3": 320} and fed.values == {"x": 0.5}
    assert job.dims == {}  # the spec itself is left as it was


def test_a_spec_the_profile_adds_nothing_to_is_handed_back_as_it_is() -> None:
    profile = propose_input_profile(TEXT_LINE)
    own = BenchmarkSpec(dims={"x.3": 160})
    arrays = BenchmarkSpec(inputs_file="feeds.npz")

    assert own.over(profile, TEXT_LINE) is own
    assert arrays.over(profile, TEXT_LINE) is arrays


def test_a_job_with_samples_of_its_own_leaves_the_guessed_sizes_to_them() -> None:
    profile = propose_input_profile(TEXT_LINE)

    plain = OptimizeJobSpec(recipes=["fusion"]).over(profile, TEXT_LINE)
    with_data = OptimizeJobSpec(recipes=["fusion"], data_path="lines.npz").over(profile, TEXT_LINE)

    assert plain.dims == {"x.3": 320}
    assert with_data.dims == {} and with_data.data_path == "lines.npz"


def test_what_the_profile_adds_is_validated_as_the_spec() -> None:
    """A profile read without validation (another version's) cannot slip a bad size into a
    spec: the spec so fed is validated, where a copy with an update is not."""
    broken = InputProfile.model_construct(
        shapes={"x": [1, 3, 48, "wide"]}, batch_axes={"x": 0}, values={}, guessed={}
    )

    with pytest.raises(ValidationError, match="dims"):
        BenchmarkSpec().over(broken, TEXT_LINE)
