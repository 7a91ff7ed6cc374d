"""How a page sends a job: `jobs_services.submit` to a live worker's queue, its refusal drawn.

Every form that starts a job calls `submit` with its kind, the model and a function that makes
the spec from the form's values; the page says what was submitted. Bad settings read "Check
the <what> settings: ..."; any other refusal (no live worker offers the target, data that does
not fit) is drawn by `show_error`, with its hint. A one-click job (a button on the model
card) is `job_button`: the button, the submit, and what was sent with the Jobs page's link.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from optistudio.services.jobkinds import JobKindInfo, SpecT
from optistudio.studio import jobs_services, pages, state
from optistudio.studio.errors import show_error
from optistudio.studio.jobs_services import Refused, Submitted


def send(
    kind: JobKindInfo[SpecT, Any], model_id: int, make_spec: Callable[[], SpecT]
) -> Submitted[SpecT] | Refused:
    """Send the job to the live worker routing picks; its refusal returned, not drawn."""
    return jobs_services.submit(
        state.session_factory(),
        kind,
        model_id,
        make_spec,
        route=state.route_job,
        sender=state.sender,
    )


def submit(
    kind: JobKindInfo[SpecT, Any],
    model_id: int,
    make_spec: Callable[[], SpecT],
    *,
    what: str = "",
) -> Submitted[SpecT] | None:
    """Send the job; None after drawing why it was refused (`what` names the settings)."""
    outcome = send(kind, model_id, make_spec)
    if isinstance(outcome, Refused):
        show_refusal(outcome, what=what)
        return None
    return outcome


def show_refusal(refused: Refused, *, what: str = "", prefix: str = "") -> None:
    """Draw a refusal: bad settings as one sentence, any other as `show_error` draws it."""
    if refused.error is not None:
        show_error(refused.error, prefix=prefix)
    else:
        st.error(prefix + refused.check(what))


def job_button(
    label: str,
    *,
    key: str,
    kind: JobKindInfo[SpecT, Any],
    model_id: int,
    make_spec: Callable[[], SpecT],
    then: str,
) -> None:
    """A button that sends the job when pressed, then says '<Kind> job #N submitted: `then`'
    with a link to follow it on the Jobs page (a refusal drawn as `submit` draws it)."""
    if not st.button(label, key=key):
        return
    sent = submit(kind, model_id, make_spec)
    if sent is None:
        return
    st.success(f"{kind.kind.value.capitalize()} job #{sent.job_id} submitted: {then}")
    pages.link("jobs", "Follow it on the Jobs page")
