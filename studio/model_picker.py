"""The "Model" select box the pages that work on one stored model open with: it follows
`?model=ID` in the URL (a shared or bookmarked page opens on that model) and writes the choice
back there; with no model stored yet the page shows its own empty state instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from optistudio.studio import cached


def name_label(choice: dict[str, Any]) -> str:
    """`#ID · name`: how the select box names a model."""
    return f"#{choice['id']} · {choice['name']}"


def pick_model(
    choices: list[dict[str, Any]], *, label: Callable[[dict[str, Any]], str] = name_label
) -> dict[str, Any]:
    """The row of the model chosen among `choices` (not empty): the URL's `?model=ID` when it
    names one of them, else the first; the choice is written back to the URL."""
    by_id = {choice["id"]: choice for choice in choices}
    ids = list(by_id)
    wanted = st.query_params.get("model")
    default = ids.index(int(wanted)) if wanted and wanted.isdigit() and int(wanted) in by_id else 0
    chosen = st.selectbox("Model", ids, index=default, format_func=lambda i: label(by_id[i]))
    model_id = ids[default] if chosen is None else int(chosen)
    st.query_params["model"] = str(model_id)
    return by_id[model_id]


def chosen_model(empty: str, choices: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
    """`pick_model` over `choices` (default: the stored models, `cached.model_choices`), or
    None after showing `empty` (what to do first) when there are none."""
    choices = cached.model_choices() if choices is None else choices
    if not choices:
        st.info(empty)
        return None
    return pick_model(choices)
