"""Whose file failed: the user's own, or one the studio made.

A backend's load error reads the same for every file ("ONNX Runtime could not load this
model: ..."), and its hint sends the user to check the file on their machine. That hint is
right for the user's upload and wrong for a file the studio made (an optimize variant: the
catalogue's origin 'variant', with a parent): such a file is the output of a pass, so its error
says so and names the pass. On the reference backend (ONNX Runtime, where every pass writes
for) a made file that does not load is a bug in the pass; on another backend it may be that
backend's limit, and the sentence says both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from optistudio.core.errors import InferenceFailed, ModelLoadError, OptistudioError

REFERENCE = "onnxruntime"
LOAD_PREFIXES = ("ONNX Runtime could not load this model: ", "OpenVINO could not load this model: ")


def user_file_hint(runtime: str, version: str) -> str:
    """The hint for the user's own file that a runtime refuses (never for a made one)."""
    return f"Check that it loads with {runtime} {version} on your machine."


def made_by_studio(
    error: OptistudioError, *, precision: str, passes: Sequence[str], backend: str = REFERENCE
) -> OptistudioError:
    """`error` of a file the studio made with `passes`, blaming them rather than the user's
    model; errors other than loading or running the file are returned as they are."""
    if not isinstance(error, ModelLoadError | InferenceFailed):
        return error
    verb = "load" if isinstance(error, ModelLoadError) else "run"
    made = f"The {(precision or 'fp32').upper()} file the studio made with {_names(passes)}"
    where = "" if backend == REFERENCE else f" on {backend}"
    message = f"{made} failed to {verb}{where}: {_detail(error.message)}"
    return type(error)(message, hint=_hint(backend))


def passes_of(recipe: Mapping[str, Any] | None) -> list[str]:
    """The passes a stored recipe ran ({'name': ..., 'steps': [{'step': 'int8_static'}]}),
    else its name; [] for none."""
    recipe = recipe or {}
    steps = [str(step.get("step") or "") for step in recipe.get("steps") or []]
    return [name for name in steps if name] or [str(recipe.get("name") or "")]


def _hint(backend: str) -> str:
    if backend == REFERENCE:
        return (
            "This is a bug in Optistudio's pass, not your model: please report it with the "
            "job's log. Your original is untouched; the other variants are unaffected."
        )
    return (
        f"Either the pass wrote what {backend} does not take, or {backend} lacks an operator "
        "the pass used; not your model. Your original is untouched; try the variant on "
        "onnxruntime."
    )


def _names(passes: Sequence[str]) -> str:
    named = [name for name in passes if name]
    return " + ".join(named) if named else "an optimization pass"


def _detail(message: str) -> str:
    for prefix in LOAD_PREFIXES:
        if message.startswith(prefix):
            return message.removeprefix(prefix)
    return message
