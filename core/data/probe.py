"""An input profile checked by running the model once, and the next sizes tried when it fails.

A proposal (`propose_profile`) guesses the dims nobody gave: 224 for an image side, 128 for a
token sequence. Some models run only at some sizes (a detector whose sides must be multiples of
32, a head reshaped to a constant size), and a guess that does not run fails every stage of
every job. `check_profile` runs the model once with ONNX Runtime on the CPU, at batch 1 (or its
fixed batch), on inputs synthesised from the profile under the job's own settings exactly as a
job synthesises them (optistudio.core.data.inputs). When that run fails it tries the candidates
for the dims the profile guessed and the job leaves to it (optistudio.core.data.size_candidates:
sizes the model implies, multiples of its stride, common sides and lengths); what the user or a
stored, edited profile fixed is never changed. At most `max_runs` runs, and no new one once
`seconds` have passed (the last run's time counted ahead). The first that runs wins: its sizes
replace the guesses, and each guess's reason says it was checked by a run (CHECKED), so a stored
profile is checked once. When none runs, InvalidSpec names the inputs, the sizes tried, the last
error and the flag that gives the sizes. A model ONNX Runtime cannot load is not checked: the
profile is returned as it was, and `how` says why.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.data.batch import batch_sizes_to_run
from optistudio.core.data.input_profile import InputProfile
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.data.size_candidates import (
    GuessedDim,
    SizeUnit,
    assignments,
    guessed_dims,
    image_sides,
    implied_sizes,
    size_units,
    unit_label,
)
from optistudio.core.errors import InvalidSpec, first_line
from optistudio.core.model.info import ModelInfo, TensorSpec

MAX_RUNS = 8
"""Most runs one check makes (the proposal's included)."""
CHECK_SECONDS = 30.0
"""No new trial run starts once this long has gone on trial runs (a model slow per run)."""
CHECKED = "checked by a run"
"""The words each guessed reason ends with once a run confirmed it."""
_ERROR_CHARS = 200
_RUNTIME_PREFIX = re.compile(r"^\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
_NODE_FAILED = re.compile(
    r"Non-zero status code returned while running (\w+) node\. Name:'([^']*)' Status Message: "
)
_SOURCE_PLACE = re.compile(r"\S+\.(?:h|cc|cpp):\d+\s+(?:[\w:<>,&* ]*::\w+\([^)]*\)\s*)?")
_ASSERTION = re.compile(r"^.*? was false\.\s*")


class ProfileCheck(BaseModel):
    """What `check_profile` ran the model at, and how it got there."""

    model_config = ConfigDict(extra="forbid")

    profile: InputProfile = Field(description="The profile that ran (guesses marked checked).")
    shapes: dict[str, list[int]] = Field(
        description="The shape of each input it ran (or runs) at; {} when nothing was guessed."
    )
    how: str = Field(description="How it got there: 'proposed, checked by a run', ...")
    guesses: int = Field(description="Guessed dims left to the profile (0: nothing to check).")
    runs: int = Field(description="Trial runs made (0: nothing guessed, or not checked).")
    checked: bool = Field(description="A run confirmed the profile's guesses.")

    def line(self) -> str:
        """'ran at x=1,3,48,192: proposed, checked by a run' (one line for a terminal)."""
        shapes = " ".join(f"{n}={','.join(map(str, s))}" for n, s in self.shapes.items())
        return f"{'ran' if self.checked else 'runs'} at {shapes or 'no inputs'}: {self.how}"

    def summary(self) -> dict[str, Any]:
        """The fact as a command's JSON holds it: {'shapes': ..., 'how': ..., 'runs': ...}."""
        return {"shapes": self.shapes, "how": self.how, "runs": self.runs}


def check_profile(
    model_path: Path,
    info: ModelInfo,
    profile: InputProfile,
    *,
    given: ModelInputs | None = None,
    max_runs: int = MAX_RUNS,
    seconds: float = CHECK_SECONDS,
) -> ProfileCheck:
    """`profile` checked by a run under `given` (shapes, dims, values, inputs_file, batch_axes;
    default none), or the first candidate for its guesses that runs (see the module
    docstring). Raises InvalidSpec naming the inputs and the flag when no candidate runs."""
    given = given if given is not None else ModelInputs()
    specs = info.inputs
    dims = guessed_dims(specs, profile, given)
    if not dims:  # nothing to check: the job's own run validates what it was given
        return ProfileCheck(
            profile=profile, shapes={}, how="no size guessed", guesses=0, runs=0, checked=False
        )
    session, why_not = _session(model_path)
    if session is None:
        return _unchecked(specs, profile, given, f"proposed, not checked: {why_not}", len(dims))
    started = time.perf_counter()
    error = _trial(session, _feeds(specs, profile, given))
    if error is None:
        marked = _marked(profile, dims, {}, [])
        return _ran(specs, marked, given, "proposed, " + CHECKED, len(dims), 1)
    metadata = dict(session.get_modelmeta().custom_metadata_map)
    units = size_units(specs, dims, implied_sizes(model_path, specs, metadata))
    tried, first_error = [_label(units, _proposal(dims))], error
    took = time.perf_counter() - started
    for sizes in assignments(units, max_runs)[1:]:
        if time.perf_counter() - started + took > seconds:
            break
        before = time.perf_counter()
        trial = _sized(profile, dims, sizes)
        error = _trial(session, _feeds(specs, trial, given))
        took = time.perf_counter() - before
        if error is None:
            how = f"after {', '.join(tried)} failed ({first_error}); {CHECKED}"
            marked = _marked(trial, dims, sizes, tried)
            return _ran(specs, marked, given, how, len(dims), len(tried) + 1)
        tried.append(_label(units, sizes))
    raise _none_ran(specs, profile, units, tried, error)


def check_needed(profile: InputProfile, specs: list[TensorSpec], job: Any) -> bool:
    """Whether a stored `profile` should be checked by a run before `job` (a spec): it still
    holds guesses no run confirmed, and the job is fed by some of them (it takes inputs, gives
    no inputs file or data of its own, and leaves a guessed dim to the profile)."""
    if not isinstance(job, ModelInputs) or job.brings_samples():
        return False
    return bool(unchecked_guesses(profile)) and bool(guessed_dims(specs, profile, job))


def unchecked_guesses(profile: InputProfile) -> list[str]:
    """The guessed dims ('INPUT.INDEX') no run has confirmed: a stored profile to check."""
    return [
        key
        for key, why in profile.guessed.items()
        if key.rpartition(".")[2].isdigit() and not why.endswith(CHECKED)
    ]


def _session(model_path: Path) -> tuple[Any, str]:
    """An ONNX Runtime CPU session, quiet (a failing trial would log a page), or why not."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # noqa: BLE001 - the runtime raises its own untyped errors
        return None, f"ONNX Runtime could not load it ({_short(exc)})"
    return session, ""


def _trial(session: Any, feeds: dict[str, np.ndarray]) -> str | None:
    """None when the model runs on `feeds`, else the runtime's reason (one short line)."""
    try:
        session.run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - the runtime raises its own untyped errors
        return _short(exc)
    return None


def _feeds(
    specs: list[TensorSpec], profile: InputProfile, given: ModelInputs
) -> dict[str, np.ndarray]:
    """The inputs a job given `given` feeds under `profile`, at batch 1 (or the fixed batch)."""
    # never unchanged here: an inputs file leaves nothing guessed
    fed = given.model_inputs.over(profile, specs)
    batch = batch_sizes_to_run(
        specs, shapes=fed.shapes, requested=None, default=[1], axes=fed.batch_axes
    )[0]
    return fed.user_feeds(specs, batch_size=batch)[0]


def _unchecked(
    specs: list[TensorSpec], profile: InputProfile, given: ModelInputs, how: str, guesses: int
) -> ProfileCheck:
    shapes = _shapes(_feeds(specs, profile, given))
    return ProfileCheck(
        profile=profile, shapes=shapes, how=how, guesses=guesses, runs=0, checked=False
    )


def _ran(
    specs: list[TensorSpec],
    profile: InputProfile,
    given: ModelInputs,
    how: str,
    guesses: int,
    runs: int,
) -> ProfileCheck:
    shapes = _shapes(_feeds(specs, profile, given))
    return ProfileCheck(
        profile=profile, shapes=shapes, how=how, guesses=guesses, runs=runs, checked=True
    )


def _sized(profile: InputProfile, dims: list[GuessedDim], sizes: dict[str, int]) -> InputProfile:
    """`profile` with each guessed dim at its size in `sizes`."""
    shapes = {name: list(shape) for name, shape in profile.shapes.items()}
    for dim in dims:
        for name, axis in dim.members:
            shapes[name][axis] = sizes.get(dim.key, dim.size)
    return profile.model_copy(update={"shapes": shapes})


def _marked(
    profile: InputProfile, dims: list[GuessedDim], sizes: dict[str, int], failed: list[str]
) -> InputProfile:
    """`profile` whose guessed reasons for `dims` say a run checked them (and what failed)."""
    guessed = dict(profile.guessed)
    for dim in dims:
        size = sizes.get(dim.key, dim.size)
        for name, axis in dim.members:
            key = f"{name}.{axis}"
            if key not in guessed or guessed[key].endswith(CHECKED):
                continue
            if size == dim.size:
                guessed[key] = f"{guessed[key]}; {CHECKED}"
            else:
                guessed[key] = f"{size}: {', '.join(failed)} did not run; {CHECKED}"
    return profile.model_copy(update={"guessed": guessed})


def _none_ran(
    specs: list[TensorSpec],
    profile: InputProfile,
    units: list[SizeUnit],
    tried: list[str],
    error: str | None,
) -> InvalidSpec:
    names = list(dict.fromkeys(unit.input for unit in units))
    flags = " ".join(f"--shape {_shape_form(specs, profile, units, name)}" for name in names)
    its = "its size" if len(names) == 1 else "their sizes"
    return InvalidSpec(
        f"{' and '.join(names)} could not run at {', '.join(tried)} (last error: {error}); "
        f"give {its} with {flags}",
        hint="In the studio, set the sizes in the model's input profile (the model card).",
    )


def _shape_form(
    specs: list[TensorSpec], profile: InputProfile, units: list[SizeUnit], name: str
) -> str:
    """'x=1,3,H,W': the input's shape with the guessed dims as letters to fill in."""
    spec = next(spec for spec in specs if spec.name == name)
    letters = {}
    sides = image_sides(spec) or ()
    for unit in units:
        for dim in unit.dims:
            for member, axis in dim.members:
                if member == name:
                    letters[axis] = "HW"[sides.index(axis)] if axis in sides else "N"
    shape = profile.shapes[name]
    return f"{name}=" + ",".join(letters.get(axis, str(size)) for axis, size in enumerate(shape))


def _label(units: list[SizeUnit], sizes: dict[str, int]) -> str:
    return " and ".join(unit_label(unit, sizes) for unit in units)


def _proposal(dims: list[GuessedDim]) -> dict[str, int]:
    return {dim.key: dim.size for dim in dims}


def _shapes(feeds: dict[str, np.ndarray]) -> dict[str, list[int]]:
    return {name: list(array.shape) for name, array in feeds.items()}


def _short(exc: BaseException) -> str:
    """The runtime's reason in one short line: 'Reshape node 'r': The input tensor cannot be
    reshaped ...', without its error code, source file and C++ signature."""
    text = _RUNTIME_PREFIX.sub("", first_line(exc, limit=2000))
    failed = _NODE_FAILED.search(text)
    if failed:
        reason = _ASSERTION.sub("", _SOURCE_PLACE.sub("", text[failed.end() :], count=1))
        text = f"{failed.group(1)} node {failed.group(2)!r}: {reason}"
    return text if len(text) <= _ERROR_CHARS else text[: _ERROR_CHARS - 3] + "..."
