"""Jobs: live status and progress, with Cancel; where a queued job stands among the workers;
deleting a finished job (its result, measurements and files) after a confirmation."""

from __future__ import annotations

import time

import pandas as pd
import streamlit as st

from optistudio.core.errors import ErrorInfo
from optistudio.core.passes.qat_history import read_history
from optistudio.db.queries import WORKER_LOST
from optistudio.studio import deletion_services, pages, state
from optistudio.studio.errors import show_error
from optistudio.studio.formatting import readable_frame
from optistudio.studio.job_status import QueueState, queue_note, status_text
from optistudio.studio.job_view import JobView
from optistudio.studio.jobs_services import cancel_job, job_rows, queue_state
from optistudio.studio.worker_services import check_workers

RECENT = 8
CONFIRM_KEY = "confirm-delete-job"
DELETED_KEY = "deleted-job-note"
DELETED_SHOWN_S = 60.0
"""How long the 'Deleted job #N' note stays on a page that reruns by itself."""
STATUS_ICON = {
    "queued": ":material/schedule:",
    "running": ":material/play_circle:",
    "succeeded": ":green[:material/check_circle:]",
    "failed": ":red[:material/error:]",
    "cancelled": ":gray[:material/cancel:]",
    "timed_out": ":orange[:material/timer_off:]",
}
LOST_ICON = ":orange[:material/warning:]"


def render() -> None:
    st.title("Jobs")
    st.caption("Updates every second. Heavy work runs on the workers; this page only watches.")
    live_jobs()


@st.fragment(run_every="1s")
def live_jobs() -> None:
    stale_after_s = state.settings().heartbeat_s * state.HEARTBEAT_STALE_FACTOR
    live = check_workers(state.session_factory(), max_age_s=stale_after_s)
    rows = job_rows(state.session_factory())
    said, when = st.session_state.get(DELETED_KEY, ("", 0.0))
    if said and time.monotonic() - when < DELETED_SHOWN_S:  # the page reruns while jobs run
        st.success(said)
    if not rows:
        st.info("No jobs yet. Start a benchmark from the Models page.")
        return
    waiting = [r for r in rows if r.active]
    if not live and waiting:
        no_worker(waiting)
    queue = queue_state(state.session_factory(), max_age_s=stale_after_s) if waiting else None
    for row in rows[:RECENT]:
        if row.active and queue is not None:
            active_job(row, queue)
        else:
            finished_job(row)
    st.markdown("**All jobs**")
    st.dataframe(
        jobs_table(rows),
        hide_index=True,
        width="stretch",
        column_config={
            "progress": st.column_config.ProgressColumn(
                "progress", min_value=0, max_value=1, format="percent"
            ),
        },
    )
    delete_older(rows)


def no_worker(waiting: list[JobView[None]]) -> None:
    lost = sum(worker_lost(r) for r in waiting)
    st.warning(
        f"No worker is running, so {len(waiting)} unfinished job(s) wait"
        + (f", {lost} of them because their worker was lost mid-run" if lost else "")
        + ". They run when a worker starts: `make up` starts one; `optistudio worker` adds one."
    )


def worker_lost(row: JobView[None]) -> bool:
    """Queued again after its worker died while no worker ran (optistudio.db.queries.WORKER_LOST)."""
    return row.status == "queued" and row.message.startswith(WORKER_LOST)


def active_job(row: JobView[None], queue: QueueState) -> None:
    with st.container(border=True):
        left, right = st.columns([5, 1])
        icon = LOST_ICON if worker_lost(row) else STATUS_ICON[row.status]
        label = f"{icon} Job #{row.id} · {row.kind} · {row.model}"
        said = status_text(row, now=queue.now)
        left.progress(min(max(row.progress, 0.0), 1.0), text=f"{label} — {said}")
        epochs = read_history(row.message)  # quantization-aware training's per-epoch line
        if epochs:
            left.line_chart(pd.DataFrame(epochs).set_index("epoch"), height=160)
        if right.button("Cancel", key=f"cancel-{row.id}", disabled=row.cancel_requested):
            st.toast(cancel_job(state.session_factory(), job_id=row.id, revoke=state.revoke_task))
        note = queue_note(row, queue, lost=worker_lost(row))
        if note:
            left.caption(note)


def finished_job(row: JobView[None]) -> None:
    with st.container(border=True):
        left, right = st.columns([5, 1])
        with left:
            text = f"{STATUS_ICON[row.status]} Job #{row.id} · {row.kind} · {row.model}"
            st.markdown(f"{text} — **{row.status}**")
            if row.message and not row.succeeded:
                show_error(row)
            elif row.message:
                st.caption(row.message)
            if row.succeeded:
                result_link(row)
        if right.button("Delete…", key=f"delete-job-{row.id}"):
            st.session_state[CONFIRM_KEY] = row.id
        if st.session_state.get(CONFIRM_KEY) == row.id:
            confirm_delete(row.id)


def delete_older(rows: list[JobView[None]]) -> None:
    """Any finished job (the cards above show the latest few), deleted after a confirmation."""
    older = [r.id for r in rows[RECENT:] if not r.active]
    if not older:
        return
    with st.expander("Delete an older job"):
        picked = st.selectbox("Finished job", older, format_func=lambda i: f"Job #{i}")
        if st.button("Delete…", key="delete-older-job"):
            st.session_state[CONFIRM_KEY] = picked
        if st.session_state.get(CONFIRM_KEY) == picked:
            confirm_delete(picked)


def confirm_delete(job_id: int) -> None:
    """What deleting the job removes and frees, then "Delete for good" or "Keep it"."""
    factory, settings = state.session_factory(), state.settings()
    plan = deletion_services.job_plan(factory, settings, job_id=job_id)
    if isinstance(plan, ErrorInfo):
        st.session_state.pop(CONFIRM_KEY, None)
        return
    st.warning(deletion_services.confirmation(plan))
    yes, no, _ = st.columns([1, 1, 4])
    if no.button("Keep it", key=f"keep-job-{job_id}"):
        st.session_state.pop(CONFIRM_KEY, None)
        st.rerun()
    if yes.button("Delete for good", type="primary", key=f"delete-job-now-{job_id}"):
        st.session_state.pop(CONFIRM_KEY, None)
        outcome = deletion_services.delete_job_now(factory, settings, job_id=job_id)
        if isinstance(outcome, ErrorInfo):
            show_error(outcome, prefix="Not deleted: ")
            return
        st.session_state[DELETED_KEY] = (outcome, time.monotonic())
        st.rerun()


def result_link(row: JobView[None]) -> None:
    """A same-tab link to the page that shows this job's result."""
    target = pages.result_target(row.kind, row.model_id)
    if target is not None:
        path, query = target
        pages.link(path, f"See it on the {pages.BY_PATH[path].title} page", query=query)


def jobs_table(rows: list[JobView[None]]) -> pd.DataFrame:
    """Every job as a row; a job not finished yet reads 'not yet' in its finished cell."""
    return readable_frame(
        (
            {
                "job": r.id,
                "status": r.status,
                "model": r.model or None,
                "kind": r.kind,
                "progress": r.progress,
                "message": r.message or None,
                "code": r.error_code,
                "created": r.created_at,
                "finished": r.finished_at or ("not yet" if r.active else None),
                "worker": r.worker or None,
            }
            for r in rows
        ),
        keep=["progress"],
    )
