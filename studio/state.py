"""Process-wide resources of the studio, created once per Streamlit server."""

from __future__ import annotations

from typing import Any

import streamlit as st
from sqlalchemy.orm import Session, sessionmaker

from db.session import make_session_factory
from optistudio.settings import Settings, get_settings


@st.cache_resource
def settings() -> Settings:
    return get_settings()


@st.cache_resource
def session_factory() -> sessionmaker[Session]:
    return make_session_factory(settings().database_url)


@st.cache_resource
def celery_app() -> Any:
    from workers.app import app

    return app


def send_task(name: str, args: list[Any]) -> str:
    result = celery_app().send_task(
        name,
        args=args,
        retry=True,
        retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5},
    )
    return str(result.id)


def revoke_task(task_id: str) -> None:
    celery_app().control.revoke(task_id)
