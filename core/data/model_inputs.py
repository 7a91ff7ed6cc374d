"""How a job feeds its model, as one value: `ModelInputs`.

Every spec that runs a model (benchmark, comparison, pipeline, soak, operator profile,
optimize, the latency profile and verify, video) is a `ModelInputs`: it inherits the five
fields below, declared here once, so a stored spec's JSON keeps them flat beside the spec's own
fields, as it always had them, and specs stored before this class existed read back unchanged.
What a field means is the same in every spec:

- `shapes`: full shapes by input name, run exactly as given (a batch size applies only to the
  inputs without one);
- `dims`: sizes of named dynamic dims ('sequence') or of 'INPUT.INDEX' dims;
- `values`: fixed values (a number filling the input, or one request's small array);
- `inputs_file`: an .npz of arrays used as those inputs exactly as given;
- `batch_axes`: batch axes where the inferred one is wrong (None: no batch axis).

The engine's entry points take the value (`spec.model_inputs`) and make feeds through its
methods, so there is one way from a spec to the arrays a model runs on (the rules are
optistudio.core.data.inputs'). A model's stored input profile
(optistudio.core.data.input_profile.InputProfile) fills the fields a job leaves empty before the job
runs: `spec.over(profile, inputs)` is the spec so fed, validated as its own class.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.data.inputs import (
    BatchAxesField,
    InputsFile,
    InputShapes,
    InputValues,
    NamedDims,
    read_input_arrays,
    requests_batch,
    synthesize_inputs,
    user_inputs,
)
from optistudio.core.model.info import TensorSpec

Feeds = dict[str, np.ndarray]
InputsT = TypeVar("InputsT", bound="ModelInputs")


class ProfileUnder(Protocol):
    """What `ModelInputs.over` lays under a spec: a model's input profile
    (optistudio.core.data.input_profile.InputProfile), which imports this module."""

    def under(self, specs: list[TensorSpec], job: ModelInputs) -> dict[str, Any]: ...


class ModelInputs(BaseModel):
    """The shapes, dims, values, arrays file and batch axes a model is run at."""

    model_config = ConfigDict(extra="forbid")

    FIELDS: ClassVar[tuple[str, ...]] = ("shapes", "dims", "values", "inputs_file", "batch_axes")

    shapes: InputShapes = Field(
        default_factory=dict,
        description="Full input shapes by input name, e.g. {'input_ids': [1, 128]}, run "
        "exactly as given; a batch size applies to the inputs without one.",
    )
    dims: NamedDims = Field(default_factory=dict)
    values: InputValues = Field(default_factory=dict)
    inputs_file: InputsFile = None
    batch_axes: BatchAxesField = Field(default_factory=dict)

    @property
    def model_inputs(self) -> ModelInputs:
        """These five fields alone, as a plain ModelInputs (of a spec: without its settings)."""
        if type(self) is ModelInputs:
            return self
        return ModelInputs(**{name: getattr(self, name) for name in self.FIELDS})

    def given(self) -> bool:
        """Whether anything is set (an empty value lets a model's input profile decide)."""
        return any(getattr(self, name) for name in self.FIELDS)

    def brings_samples(self) -> bool:
        """Whether the job brings sample arrays of its own (calibration data) whose shapes
        size the inputs: a model's profile then leaves out the sizes it guessed. A spec with
        such a file says so; these five fields alone never do."""
        return False

    def over(self: InputsT, profile: ProfileUnder, inputs: list[TensorSpec]) -> InputsT:
        """These settings with the model's input `profile` under them (`inputs`: its card's):
        what they set wins, the profile fills the rest (`InputProfile.under`), validated as
        this class. `self` when the profile adds nothing (an inputs file, or settings that
        already say it all)."""
        update = profile.under(inputs, self)
        if all(getattr(self, name) == value for name, value in update.items()):
            return self
        return self.model_validate({**dict(self), **update})

    def arrays(self, specs: list[TensorSpec]) -> Feeds:
        """The inputs file's arrays, checked against the model's inputs ({} without one)."""
        return read_input_arrays(self.inputs_file, specs)

    def feeds(
        self,
        specs: list[TensorSpec],
        *,
        batch_size: int,
        seed: int = 0,
        arrays: Feeds | None = None,
    ) -> tuple[Feeds, list[str]]:
        """One run's feeds at `batch_size` and the warnings about defaulted dims. `arrays` are
        used as given (already read, e.g. the inputs file's); the rest follow these inputs."""
        return synthesize_inputs(
            specs,
            batch_size=batch_size,
            dims=self.dims,
            overrides=self.shapes,
            seed=seed,
            values=self.values,
            arrays=arrays,
            batch_axes=self.batch_axes,
        )

    def user_feeds(
        self, specs: list[TensorSpec], *, batch_size: int, seed: int = 0
    ) -> tuple[Feeds, int, list[str]]:
        """One run's feeds with the inputs file read, their batch size (the one asked, or the
        one full shapes imply) and the warnings about defaulted dims."""
        return user_inputs(
            specs,
            batch_size=batch_size,
            dims=self.dims,
            shapes=self.shapes,
            values=self.values,
            inputs_file=self.inputs_file,
            seed=seed,
            batch_axes=self.batch_axes,
        )

    def dataset(
        self,
        specs: list[TensorSpec],
        *,
        samples: int,
        batch_size: int | None = None,
        seed: int = 0,
    ) -> SyntheticDataset:
        """Synthetic samples at these inputs (the inputs file's arrays in every batch), at
        `batch_size` (None: the batch the file declares fixed, else 1)."""
        return SyntheticDataset(
            specs,
            samples=samples,
            batch_size=batch_size,
            dims=self.dims,
            seed=seed,
            shapes=self.shapes,
            values=self.values,
            arrays=self.arrays(specs),
            batch_axes=self.batch_axes,
        )

    def requests(
        self,
        specs: list[TensorSpec],
        batch_size: int,
        *,
        seed: int = 0,
        arrays: Feeds | None = None,
    ) -> Feeds:
        """Feeds of `batch_size` requests stacked on each input's batch axis, for a server that
        batches them (optistudio.core.data.inputs.requests_batch): these inputs describe one
        request; `arrays` (already read, e.g. `self.arrays(specs)`) are its arrays."""
        return requests_batch(
            specs,
            batch_size,
            shapes=self.shapes,
            dims=self.dims,
            values=self.values,
            arrays=arrays,
            seed=seed,
            batch_axes=self.batch_axes,
        )
