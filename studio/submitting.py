"""How a page sends a job: `jobs_services.submit` to a live worker's queue, its refusal drawn.

Every form that starts a job calls `submit` with its kind, the model and a function that makes
the spec from the form's values; the page says what was submitted. Bad settings read "Check
the <what> settings: ..."; any other refusal (no live worker offers the target, data that does
not fit) is drawn by `show_error`, with its hint.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st

from optistudio.services.jobkinds import JobKindInfo, SpecT
from optistudio.studio import jobs_services, state
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
