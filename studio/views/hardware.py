"""Hardware: the workers, what each can serve, and whether it is alive."""

from __future__ import annotations

import streamlit as st

from optistudio.studio import state
from optistudio.studio.formatting import readable_frame
from optistudio.studio.worker_services import worker_rows

STATE_ORDER = {"live": 0, "stale": 1, "stopped": 2}


def render() -> None:
    st.title("Hardware")
    st.caption(
        "Each worker records its backends, devices and queues when it starts and on a "
        "heartbeat. Jobs go to a live worker that offers their backend and device; a target "
        "no live worker offers is refused when you submit. The int8 column is what the INT8 "
        "passes choose on that worker's CPU: 7-bit weights on x86 without VNNI/AMX, whose "
        "8-bit kernels can saturate, else 8-bit."
    )
    live_table()


@st.fragment(run_every="5s")
def live_table() -> None:
    max_age = state.settings().heartbeat_s * state.HEARTBEAT_STALE_FACTOR
    rows = sorted(
        worker_rows(state.session_factory(), max_age_s=max_age),
        key=lambda row: STATE_ORDER[row["state"]],
    )
    if not rows:
        st.info(
            "No worker has reported yet. `make up` starts one; `optistudio worker` adds one "
            "on another machine (with the same broker, database and artifact settings)."
        )
        return
    live = sum(row["state"] == "live" for row in rows)
    st.metric("Live workers", live, help=f"A worker is stale after {max_age:.0f} s without a beat.")
    st.dataframe(readable_frame(rows), hide_index=True, width="stretch")
