"""A page that hits a bug shows a short notice, not a traceback; the log keeps the details."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import streamlit as st

log = logging.getLogger(__name__)


def guarded(render: Callable[[], None]) -> Callable[[], None]:
    @functools.wraps(render)
    def page() -> None:
        try:
            render()
        except Exception:  # Streamlit's rerun/stop signals are BaseExceptions and pass through
            log.exception("internal error on page %s", render.__module__)
            st.error(
                "Internal error on this page. The details are in the studio's log; "
                "please report it. Nothing you stored was changed."
            )

    return page
