"""Each stored model's input profile: proposed at intake, edited on the card, under every job.

A variant is fed like the model it was made from, so it has no profile of its own: every
lookup goes to the original (`original_of`). A model stored before profiles existed gets one
proposed from its card the first time it is asked for.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.data.input_profile import InputProfile, propose_input_profile
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo
from optistudio.core.model.samples import list_samples
from optistudio.db.models import Model
from optistudio.db.queries import get_model, original_of, set_input_profile
from optistudio.db.session import rerun_if_lost

SpecT = TypeVar("SpecT", bound=BaseModel)


def proposed_profile(info: ModelInfo, *, sample: str | None = None) -> InputProfile:
    """The profile intake proposes: a sample's known shapes, else conventions (guesses named)."""
    known = {s.name: s.input_shapes for s in list_samples()}.get(sample or "", {})
    return propose_input_profile(info.inputs, known=known, metadata_keys=info.metadata_keys)


def profile_of(s: Session, model: Model) -> InputProfile:
    """The profile jobs on `model` use: its original's stored one, else one proposed now."""
    original = original_of(s, model)
    if original.input_profile:
        try:
            return InputProfile.model_validate(original.input_profile)
        except ValidationError:
            pass  # written by another version: propose afresh rather than fail every job
    sample = original.name if original.source == "sample" else None
    return proposed_profile(ModelInfo.model_validate(original.info), sample=sample)


def load_profile(factory: sessionmaker[Session], model_id: int) -> InputProfile:
    """The profile of a stored model (its original's, for a variant)."""
    return rerun_if_lost(factory, lambda s: profile_of(s, _model(s, model_id)))


def save_profile(factory: sessionmaker[Session], model_id: int, profile: InputProfile) -> int:
    """Store `profile` on the model's original (variants share it); returns that model's id."""

    def write(s: Session) -> int:
        original = original_of(s, _model(s, model_id))
        set_input_profile(s, model_id=original.id, profile=profile.model_dump(mode="json"))
        return original.id

    return rerun_if_lost(factory, write)


def apply_input_profile(
    s: Session, model: Model, spec: SpecT, info: ModelInfo | None = None
) -> SpecT:
    """`spec` with the model's profile under its own input settings (`ModelInputs.over`);
    unchanged for a spec that feeds no inputs. `info` is the model's card as already read
    (None: read from the row)."""
    if not isinstance(spec, ModelInputs):
        return spec
    info = info or ModelInfo.model_validate(model.info)
    return spec.over(profile_of(s, model), info.inputs)


def _model(s: Session, model_id: int) -> Model:
    model = get_model(s, model_id=model_id)
    if model is None:
        raise InvalidSpec(f"Model #{model_id} does not exist.", hint="Pick a stored model.")
    return model


def profile_json(profile: InputProfile) -> dict[str, Any]:
    """The profile as the CLI prints it and the row stores it."""
    return profile.model_dump(mode="json")
