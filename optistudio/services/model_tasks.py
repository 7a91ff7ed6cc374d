"""The task a stored model is judged in: set on its card, used by every job, shown beside what
recognition reads from its outputs.

A variant is judged like the model it was made from, so it has no task of its own: every
lookup goes to the original (`original_of`), as for the input profile. A job that names its
own task (the Optimize page's picker, the CLI's --task) keeps it; a job that leaves it open
gets the card's, and the job row records the task it ran with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.errors import InvalidSpec
from optistudio.core.numerics.evaluators.base import evaluators
from optistudio.core.numerics.evaluators.recognize import (
    constant_warning,
    model_facts,
    read_task,
)
from optistudio.core.optimize.run import NO_TASK
from optistudio.db.models import Model
from optistudio.db.queries import get_model, original_of, set_model_task
from optistudio.db.session import transaction

SpecT = TypeVar("SpecT", bound=BaseModel)


def task_names() -> list[str]:
    """The tasks a card may set: every registered evaluator's name, and 'none'."""
    return [info.name for info in evaluators] + [NO_TASK]


def checked_task(task: str | None) -> str | None:
    """`task` when it names a registered evaluator or 'none'; None (recognize) for ''/None;
    InvalidSpec naming the valid ones otherwise."""
    if not task:
        return None
    if task not in task_names():
        raise InvalidSpec(
            f"Unknown task {task!r}.",
            hint=f"Pick one of {', '.join(task_names())}, or leave it empty to recognize it.",
        )
    return task


def task_of(s: Session, model: Model) -> str | None:
    """The task jobs on `model` are judged in: its original's (None: recognized per job)."""
    return original_of(s, model).task


def load_task(factory: sessionmaker[Session], model_id: int) -> str | None:
    """The task set on a stored model's card (its original's, for a variant); None: unset."""
    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        if model is None:
            raise LookupError(f"model {model_id} does not exist")
        return task_of(s, model)


def save_task(factory: sessionmaker[Session], model_id: int, task: str | None) -> int:
    """Set the task on the model's original (variants share it); returns that model's id."""
    task = checked_task(task)
    with transaction(factory) as s:
        model = get_model(s, model_id=model_id)
        if model is None:
            raise LookupError(f"model {model_id} does not exist")
        original = original_of(s, model)
        set_model_task(s, model_id=original.id, task=task)
        return original.id


def with_task(s: Session, model: Model, spec: SpecT) -> SpecT:
    """`spec` judged in the card's task when it has a `task` field it leaves open; unchanged
    otherwise (a spec of a kind that judges nothing, or one that names its own task)."""
    if "task" not in type(spec).model_fields or getattr(spec, "task", None) is not None:
        return spec
    task = task_of(s, model)
    return spec if task is None else spec.model_copy(update={"task": task})


@dataclass(frozen=True)
class Recognized:
    """What recognition reads from a model's graph alone (no run), for the card to show."""

    task: str | None
    """The evaluator's name; None when no task was recognized."""
    label: str
    """The task's name for people, or 'none recognized'."""
    confidence: str | None
    reasons: tuple[str, ...]
    """The evidence weighed, heaviest first; without a task, why none was recognized."""
    warnings: tuple[str, ...] = ()
    """What the card must say beside the task: outputs no input reaches (every accuracy check
    then compares constants)."""

    def line(self) -> str:
        """'Object detection (boxes), high confidence' or 'none recognized: <why>'; a task read
        with low confidence says that the numbers judge."""
        if self.task is None:  # an optimize job then reads the shapes one run returns
            why = f": {self.reasons[0]}" if self.reasons else ""
            return f"none recognized from the declared outputs{why} (a job reads them again from one run)"
        if self.confidence == "low":
            return (
                f"{self.label}, low confidence: jobs judge by output cosine and the numeric "
                "floor, its metrics shown beside (set the task to have them decide)"
            )
        return f"{self.label}, {self.confidence} confidence" if self.confidence else self.label


def recognized(path: Path) -> Recognized:
    """The task recognition reads from the model at `path` (its declared outputs, graph and
    metadata; no run: the studio never runs a model). An optimize job whose declared shapes
    show no task reads them again from one run (optistudio.core.optimize.run_shapes)."""
    facts = model_facts(path)
    reading = read_task(facts)
    warned = tuple(filter(None, [constant_warning(facts)]))
    if reading.found is None:
        return Recognized(None, "none recognized", None, tuple(reading.reasons), warned)
    info, recognition = reading.found
    reasons = tuple(reading.reasons)
    return Recognized(info.name, info.label, recognition.confidence, reasons, warned)


def task_label(task: str | None) -> str:
    """A stored task's name for people: the evaluator's label, or what 'none' means."""
    if task is None:
        return "recognized per job"
    if task == NO_TASK:
        return "none: cosine and top-1 only"
    return next((info.label for info in evaluators if info.name == task), task)
