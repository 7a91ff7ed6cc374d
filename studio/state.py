"""Process-wide resources of the studio, created once per Streamlit server."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import streamlit as st
from sqlalchemy.orm import Session, sessionmaker

from optistudio.db.session import make_session_factory
from optistudio.services.jobkinds import JobKindInfo, SpecT
from optistudio.services.settings import Settings, get_settings
from optistudio.studio.routing import live_targets as targets
from optistudio.studio.routing import qat_places as routing_qat_places
from optistudio.studio.routing import route
from optistudio.workers.app import app

HEARTBEAT_STALE_FACTOR = 3


@st.cache_resource
def settings() -> Settings:
    return get_settings()


@st.cache_resource
def session_factory() -> sessionmaker[Session]:
    return make_session_factory(settings().database_url)


@st.cache_resource
def celery_app() -> Any:
    return app


def sender(queue: str) -> Callable[[str, list[Any]], str]:
    """Sends tasks by name to `queue` (the queue routing chose for the job's target)."""

    def send(name: str, args: list[Any]) -> str:
        result = celery_app().send_task(
            name,
            args=args,
            queue=queue,
            retry=True,
            retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.5},
        )
        return str(result.id)

    return send


def route_to(
    backend: str, device: str, suits: Callable[[dict[str, Any]], int] | None = None
) -> str:
    """The queue of a live worker that offers backend on device, the one `suits` ranks first
    (NoWorkerForTarget if none)."""
    return route(
        session_factory(),
        backend=backend,
        device=device,
        max_age_s=settings().heartbeat_s * HEARTBEAT_STALE_FACTOR,
        suits=suits,
    )


def route_job(kind: JobKindInfo[SpecT, Any], spec: SpecT) -> str:
    """The queue for a job: a live worker's that offers its target, by its kind's rule, and
    among those the one that suits it best (a QAT run: a worker training on a GPU)."""
    return route_to(*kind.target(spec), suits=lambda inventory: kind.suits(spec, inventory))


def qat_places() -> str:
    """Where quantization-aware training would run among the live workers (one sentence)."""
    return routing_qat_places(
        session_factory(), max_age_s=settings().heartbeat_s * HEARTBEAT_STALE_FACTOR
    )


def live_targets(info: Any = None) -> list[tuple[str, str, str]]:
    """(backend, device, precision) the live workers offer (for `info`'s model when given)."""
    return targets(
        session_factory(), max_age_s=settings().heartbeat_s * HEARTBEAT_STALE_FACTOR, info=info
    )


def revoke_task(task_id: str) -> None:
    celery_app().control.revoke(task_id)
