"""What the studio's page tests share: a page run by Streamlit's AppTest on this test's
settings and migrated database (the `app_settings` and `db_factory` fixtures of tests/conftest.py).

AppTest runs a script function's source alone, so a script imports what it uses inside its
body, and its annotations may name builtins only. Import these helpers as
`from tests.studio.conftest import ...`. A job a page sends is run as a worker runs it by
tests/workers/conftest.py's helpers; `one_click_variant` sends a card button's optimize job and
reads the one variant it made.
`upload` is a file as a page's uploader hands it over, `npz` the bytes of a .npz.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from optistudio.db.models import JobKind, JobStatus, Model
from optistudio.db.queries import get_model
from optistudio.db.session import transaction
from optistudio.services.jobkinds import OPTIMIZE
from optistudio.studio import state
from optistudio.workers.work import work_of
from tests.workers.conftest import read_job, work_job

APP = Path(__file__).resolve().parents[2] / "studio" / "app.py"
"""The studio's entry file (its router)."""


def clear_studio() -> None:
    """Empty the studio's process-wide caches, so a page reads this test's settings and
    database (each test's database numbers its models from 1)."""
    st.cache_data.clear()
    state.settings.clear()
    state.session_factory.clear()


@pytest.fixture
def fresh_studio(app_settings: Any) -> None:
    """The studio's caches emptied after this test's settings are in place."""
    clear_studio()


def view(module: str, function: str = "render", **kwargs: object) -> None:
    """A page script: `function` of the studio module `module` (dotted), called with
    `kwargs`, e.g. view("optistudio.studio.views.models")."""
    import importlib

    getattr(importlib.import_module(module), function)(**kwargs)


def studio_page(
    script: Callable[..., None],
    *,
    query: Mapping[str, str] | None = None,
    timeout: float = 60,
    args: tuple[Any, ...] | None = None,
    **kwargs: Any,
) -> AppTest:
    """`script` as a page, not yet run: the studio's caches emptied, `query` in its URL,
    `args` and `kwargs` passed to the script."""
    clear_studio()
    at = AppTest.from_function(script, args=args, kwargs=kwargs or None, default_timeout=timeout)
    for name, value in (query or {}).items():
        at.query_params[name] = value
    return at


def view_page(
    module: str, *, query: Mapping[str, str] | None = None, timeout: float = 60, **kwargs: Any
) -> AppTest:
    """The page of the studio view `module` (its `render`), not yet run, as `studio_page`."""
    return studio_page(view, query=query, timeout=timeout, module=module, **kwargs)


def app_page(*, query: Mapping[str, str] | None = None, timeout: float = 60) -> AppTest:
    """The whole studio from its entry file (router, login, shared views), not yet run."""
    at = AppTest.from_file(APP, default_timeout=timeout)
    for name, value in (query or {}).items():
        at.query_params[name] = value
    return at


def one_click_variant(factory: Any, make: Callable[..., int], model_id: int) -> Model:
    """The stored model of the one variant a card button's optimize job made: `make(factory,
    model_id=, send=)` commits and sends the job (one optimize task with its id, checked), a
    worker runs it, and it must have succeeded with its variant made, a child of `model_id`
    (their messages if not)."""
    sent: list[tuple[str, list[Any]]] = []
    job_id = make(
        factory, model_id=model_id, send=lambda name, args: sent.append((name, args)) or "t"
    )
    assert sent == [("optistudio.optimize", [job_id])]
    work_job(factory, job_id, work_of(JobKind.optimize))
    job = read_job(factory, job_id)
    assert job.status == JobStatus.succeeded, job.message
    [variant] = OPTIMIZE.parse_result(job.result).variants
    assert variant.status == "made" and variant.model_id is not None, variant.error
    with transaction(factory) as s:
        stored = get_model(s, model_id=variant.model_id)
        assert stored is not None and stored.parent_id == model_id
        s.expunge(stored)
        return stored


def upload(name: str, payload: bytes) -> io.BytesIO:
    """A file as Streamlit hands it over: a BytesIO with the user's file name."""
    stream = io.BytesIO(payload)
    stream.name = name
    return stream


def npz(**arrays: np.ndarray) -> bytes:
    """The bytes of a .npz holding `arrays`."""
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()
