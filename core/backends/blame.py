"""Whose file failed: the user's own, or one the studio made.

A backend's load error reads the same for every file ("ONNX Runtime could not load this
model: ..."), and its hint sends the user to check the file on their machine. That hint is
right for the user's upload and wrong for a file the studio made (an optimize variant: the
catalogue's origin 'variant', with a parent): such a file is the output of a pass, so its error
says so and names the pass. That holds on the reference backend (ONNX Runtime), which loaded
and ran the original: a made file it refuses is a bug in the pass. Another backend may refuse
an operator of the original itself (OpenVINO and an ai.onnx.ml Scaler), which is neither the
pass's fault nor a reason to doubt the user's machine, so its error is left as it reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optistudio.core.errors import InferenceFailed, ModelLoadError, OptistudioError

REFERENCE = "onnxruntime"
LOAD_PREFIXES = ("ONNX Runtime could not load this model: ", "OpenVINO could not load this model: ")


BUG_HINT = (
    "This is a bug in Optistudio's pass, not your model: please report it with the job's log. "
    "Your original is untouched; the other variants are unaffected."
)


def user_file_hint(runtime: str, version: str) -> str:
    """The hint for the user's own file that a runtime refuses (never for a made one)."""
    return f"Check that it loads with {runtime} {version} on your machine."


def made_by_studio(
    error: OptistudioError, *, precision: str, passes: Sequence[str], backend: str = REFERENCE
) -> OptistudioError:
    """`error` of a file the studio made with `passes` on `backend`, blaming them rather than
    the user's model; an error on another backend than the reference, or one that is not about
    loading or running the file, is returned as it is (module docstring)."""
    if backend != REFERENCE or not isinstance(error, ModelLoadError | InferenceFailed):
        return error
    verb = "load" if isinstance(error, ModelLoadError) else "run"
    made = f"The {(precision or 'fp32').upper()} file the studio made with {_names(passes)}"
    message = f"{made} failed to {verb}: {load_cause(error.message)}"
    return type(error)(message, hint=BUG_HINT)


def passes_of(recipe: Mapping[str, Any] | None) -> list[str]:
    """The passes a stored recipe ran ({'name': ..., 'steps': [{'step': 'int8_static'}]}),
    else its name; [] for none."""
    recipe = recipe or {}
    steps = [str(step.get("step") or "") for step in recipe.get("steps") or []]
    return [name for name in steps if name] or [str(recipe.get("name") or "")]


def _names(passes: Sequence[str]) -> str:
    named = [name for name in passes if name]
    return " + ".join(named) if named else "an optimization pass"


def load_cause(message: str) -> str:
    """A load error's cause without its "X could not load this model: " lead, for a sentence
    that names the runtime and the model itself."""
    for prefix in LOAD_PREFIXES:
        if message.startswith(prefix):
            return message.removeprefix(prefix)
    return message
