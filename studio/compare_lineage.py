"""What each compared result ran: its model and the recipe that made it.

A variant is stored under a name of its own ('tiny · int8_dynamic'), so a benchmark of it used
to read like a model of that name with no recipe, and an original like any other file. Here a
row is named by its original's name and its recipe's label ('tiny' · 'INT8 dynamic'), an
original by its own name and 'original', so the original, its graph and its fusion variants
never share a label on Compare, in a share link or in the report.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optistudio.core.report.labels import ORIGINAL
from optistudio.core.report.snapshot import ResultRow
from optistudio.db.models import Model


def recipe_label(recipe: dict[str, Any] | None) -> str:
    """A stored recipe's label ('INT8 dynamic'), else its name; '' when none is stored."""
    recipe = recipe or {}
    return str(recipe.get("label") or recipe.get("name") or "")


def lineage(s: Session, *, ids: set[int]) -> dict[int, tuple[str, str]]:
    """Model id -> (the name a row shows, its recipe): a variant's original's name and the
    recipe's label, an original's own name and 'original'."""
    query = select(Model.id, Model.name, Model.parent_id, Model.recipe).where(Model.id.in_(ids))
    models = {row.id: row for row in s.execute(query)}
    parent_ids = {m.parent_id for m in models.values() if m.parent_id}
    parents = dict(s.execute(select(Model.id, Model.name).where(Model.id.in_(parent_ids))).all())
    named = {}
    for model_id, model in models.items():
        recipe = recipe_label(model.recipe)
        if not model.parent_id:
            named[model_id] = (model.name, ORIGINAL)
        elif recipe and model.parent_id in parents:
            named[model_id] = (parents[model.parent_id], recipe)
        else:  # the original is gone, or no recipe is stored: the variant's own name says it
            named[model_id] = (model.name, recipe or "variant")
    return named


def with_lineage(s: Session, rows: list[ResultRow]) -> list[ResultRow]:
    """`rows`, each without a recipe named by its model's lineage (a deleted model's row is
    left as it is: nothing says what made it)."""
    ids = {row.model_id for row in rows if row.model_id is not None and not row.recipe}
    named = lineage(s, ids=ids) if ids else {}
    return [
        row.model_copy(update=dict(zip(("model", "recipe"), named[row.model_id], strict=True)))
        if not row.recipe and row.model_id in named
        else row
        for row in rows
    ]
