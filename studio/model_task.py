"""The model card's task: what recognition reads from the graph, and the task the user sets
(optistudio.services.model_tasks), which every job then judges the model in."""

from __future__ import annotations

from typing import Any

import streamlit as st

from optistudio.core.errors import OptistudioError
from optistudio.services.model_tasks import (
    Recognized,
    load_task,
    recognized,
    save_task,
    task_label,
    task_names,
)
from optistudio.studio import state
from optistudio.studio.errors import show_error
from optistudio.studio.model_services import model_file

RECOGNIZE = ""
"""The picker's choice that leaves the task to recognition."""


@st.cache_data(show_spinner=False, max_entries=128)
def recognized_task(sha256: str, path: str) -> Recognized | None:
    """Recognition's reading of the stored model (its digest keys the cache); None when the
    artifact store cannot give the file here."""
    stored = model_file(state.settings(), path=path, sha256=sha256)
    return recognized(stored) if stored is not None else None


def task_choices() -> list[str]:
    """The picker's options: recognition first, then each task and 'none'."""
    return [RECOGNIZE, *task_names()]


def choice_label(choice: str) -> str:
    """A picker option for people."""
    return "Recognize from the outputs" if choice == RECOGNIZE else task_label(choice)


def task_section(chosen: dict[str, Any]) -> None:
    """What the model's task reads as, and the picker that sets it for every job."""
    st.markdown("**Task**")
    factory = state.session_factory()
    reading = recognized_task(chosen["sha256"], chosen["path"])
    stored = load_task(factory, chosen["id"])
    read = reading.line() if reading else "not read (the model's file is not available here)"
    st.caption(
        f"Recognized: {read}. "
        + (
            f"Set on the card: **{task_label(stored)}**, used by every job on this model "
            "(and its variants) that does not name its own."
            if stored
            else "Jobs judge accuracy in the recognized task unless one is set here."
        )
    )
    for warning in reading.warnings if reading else ():
        st.warning(warning)
    if reading and reading.reasons and reading.task is not None:
        with st.expander("Why recognition reads it so"):
            st.markdown("\n".join(f"- {reason}" for reason in reading.reasons))
    choices = task_choices()
    with st.form(f"model_task_{chosen['id']}"):
        picked = st.selectbox(
            "Judge this model as",
            choices,
            index=choices.index(stored or RECOGNIZE),
            format_func=choice_label,
            help="The task Optimize and every accuracy check judge variants in: its own "
            "metrics (boxes found, strings read, top-1) and default budget.",
        )
        if st.form_submit_button("Save task"):
            try:
                save_task(factory, chosen["id"], picked or None)
            except OptistudioError as exc:
                show_error(exc)
            else:
                st.rerun()
