"""Jobs: live status and progress, with Cancel."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pandas as pd
import streamlit as st

from optistudio.core.passes.qat_history import read_history
from optistudio.db.queries import WORKER_LOST
from optistudio.studio import pages, state
from optistudio.studio.errors import show_error
from optistudio.studio.formatting import readable_frame
from optistudio.studio.jobs_services import cancel_job, job_rows
from optistudio.studio.worker_services import check_workers

ACTIVE = {"queued", "running"}
RECENT = 8
STUCK_AFTER_S = 30
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
    if not rows:
        st.info("No jobs yet. Start a benchmark from the Models page.")
        return
    waiting = [r for r in rows if r["status"] in ACTIVE]
    if not live and waiting:
        no_worker(waiting)
    for row in rows[:RECENT]:
        if row["status"] in ACTIVE:
            active_job(row)
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


def no_worker(waiting: list[dict[str, Any]]) -> None:
    lost = sum(worker_lost(r) for r in waiting)
    st.warning(
        f"No worker is running, so {len(waiting)} unfinished job(s) wait"
        + (f", {lost} of them because their worker was lost mid-run" if lost else "")
        + ". They run when a worker starts: `make up` starts one; `optistudio worker` adds one."
    )


def worker_lost(row: dict[str, Any]) -> bool:
    """Queued again after its worker died while no worker ran (optistudio.db.queries.WORKER_LOST)."""
    return row["status"] == "queued" and row["message"].startswith(WORKER_LOST)


def active_job(row: dict[str, Any]) -> None:
    with st.container(border=True):
        left, right = st.columns([5, 1])
        icon = LOST_ICON if worker_lost(row) else STATUS_ICON[row["status"]]
        label = f"{icon} Job #{row['job']} · {row['kind']} · {row['model']}"
        left.progress(
            min(max(row["progress"], 0.0), 1.0), text=f"{label} — {row['message'] or row['status']}"
        )
        epochs = read_history(row["message"])  # quantization-aware training's per-epoch line
        if epochs:
            left.line_chart(pd.DataFrame(epochs).set_index("epoch"), height=160)
        if right.button("Cancel", key=f"cancel-{row['job']}", disabled=row["cancel_requested"]):
            st.toast(
                cancel_job(state.session_factory(), job_id=row["job"], revoke=state.revoke_task)
            )
        waiting = queued_for(row)
        if waiting is not None and waiting > STUCK_AFTER_S and not worker_lost(row):
            left.caption(
                f"No worker has taken this job for {waiting:.0f} s. Is a worker running on the "
                "'cpu' queue? `make up` starts one; `optistudio worker` adds one."
            )


def queued_for(row: dict[str, Any]) -> float | None:
    """Seconds a queued job has waited, or None when it is not queued."""
    if row["status"] != "queued" or row["created_at"] is None:
        return None
    return (datetime.now(UTC) - row["created_at"]).total_seconds()


def finished_job(row: dict[str, Any]) -> None:
    with st.container(border=True):
        text = f"{STATUS_ICON[row['status']]} Job #{row['job']} · {row['kind']} · {row['model']}"
        st.markdown(f"{text} — **{row['status']}**")
        if row["message"] and row["status"] != "succeeded":
            show_error(row)
        elif row["message"]:
            st.caption(row["message"])
        if row["status"] == "succeeded":
            result_link(row)


def result_link(row: dict[str, Any]) -> None:
    """A same-tab link to the page that shows this job's result."""
    target = pages.result_target(row["kind"], row["model_id"])
    if target is not None:
        path, query = target
        pages.link(path, f"See it on the {pages.BY_PATH[path].title} page", query=query)


def jobs_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Every job as a row; a job not finished yet reads 'not yet' in its finished cell."""
    return readable_frame(
        (
            {
                "job": r["job"],
                "status": r["status"],
                "model": r["model"] or None,
                "kind": r["kind"],
                "progress": r["progress"],
                "message": r["message"] or None,
                "code": r["error_code"],
                "created": r["created_at"],
                "finished": r["finished_at"] or ("not yet" if r["status"] in ACTIVE else None),
                "worker": r["worker"] or None,
            }
            for r in rows
        ),
        keep=["progress"],
    )
