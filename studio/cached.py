"""What the pages read on every rerun, cached for a few seconds under the data's version.

A page runs again on every click and its fragments every 1-3 s, and each run read the same rows
again: the model list (twice on Compare), every stored result with its job's spec for the
Compare picker, the whole results frame. Each read here is cached under `data_version` (one
small query: it moves when a job is submitted, starts or ends and when a model is added), so a
change shows at the next run; `TTL_S` bounds how long anything else (an edited row) waits.
Live views (the Jobs page's progress) read directly.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from optistudio.studio import (
    compare_services,
    jobs_services,
    model_services,
    optimize_services,
    results_services,
    state,
)
from optistudio.studio.optimize_run import OptimizeRun

TTL_S = 10
"""Seconds a cached read lives at most (its stamp moves sooner when jobs or models change)."""


def version() -> tuple[Any, ...]:
    """The data's stamp now (`jobs_services.data_version`); every cached read is keyed by it."""
    return jobs_services.data_version(state.session_factory())


def model_choices() -> list[dict[str, Any]]:
    return _model_choices(version())


def results_frame(model_id: int | None) -> pd.DataFrame:
    return _results_frame(model_id, version())


def result_options() -> dict[str, str]:
    return _result_options(version())


def comparison_rows() -> list[dict[str, Any]]:
    return _comparison_rows(version())


def optimization_runs(model_id: int, limit: int = 10) -> list[OptimizeRun]:
    return _optimization_runs(model_id, limit, version())


@st.cache_data(ttl=TTL_S, show_spinner=False, max_entries=4)
def _model_choices(stamp: tuple[Any, ...]) -> list[dict[str, Any]]:
    return model_services.model_choices(state.session_factory())


@st.cache_data(ttl=TTL_S, show_spinner=False, max_entries=32)
def _results_frame(model_id: int | None, stamp: tuple[Any, ...]) -> pd.DataFrame:
    return results_services.results_frame(state.session_factory(), model_id=model_id)


@st.cache_data(ttl=TTL_S, show_spinner=False, max_entries=4)
def _result_options(stamp: tuple[Any, ...]) -> dict[str, str]:
    return compare_services.result_options(state.session_factory())


@st.cache_data(ttl=TTL_S, show_spinner=False, max_entries=4)
def _comparison_rows(stamp: tuple[Any, ...]) -> list[dict[str, Any]]:
    return results_services.comparison_rows(state.session_factory())


@st.cache_data(ttl=TTL_S, show_spinner=False, max_entries=32)
def _optimization_runs(model_id: int, limit: int, stamp: tuple[Any, ...]) -> list[OptimizeRun]:
    return optimize_services.optimization_runs(
        state.session_factory(), model_id=model_id, limit=limit
    )
