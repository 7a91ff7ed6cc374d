"""Video: N streams of a clip decoded, batched across streams and inferred on a model, measured
per stream; how many real-time streams this machine holds for it."""

from __future__ import annotations

from typing import Any

import streamlit as st

from optistudio.core.backends import backends
from optistudio.services.jobkinds import VIDEO
from optistudio.services.jobresults import VideoJobResult
from optistudio.studio import pages, state, submitting
from optistudio.studio import video_services as video
from optistudio.studio.errors import show_error
from optistudio.studio.formatting import readable_frame
from optistudio.studio.job_status import progress_text
from optistudio.studio.job_view import JobView
from optistudio.studio.jobs_services import cancel_job
from optistudio.studio.model_picker import chosen_model

DEFAULT_BACKEND = "onnxruntime"
DROP_POLICIES = {
    "drop_oldest": "Drop the oldest buffered frame",
    "skip_to_newest": "Skip to the newest frame",
}


def render() -> None:
    st.title("Video")
    st.caption(
        "Several video streams decoded at once, their frames batched across streams and "
        "inferred on the model, each stream measured on its own: fps, latency from the moment "
        "a frame is due to its result, and the frames dropped when inference falls behind."
    )
    chosen = chosen_model(
        "Add an image model on the Models page first, then play video on it here."
    )
    if chosen is None:
        return
    model_id = chosen["id"]
    video_form(model_id)
    show_latest(model_id)


def video_form(model_id: int) -> None:
    help_of = {name: field.description for name, field in VIDEO.spec.model_fields.items()}
    with st.form("video"):
        clip = st.file_uploader(
            "Clip (optional)",
            type=video.CLIP_TYPES,
            max_upload_size=state.settings().max_upload_mb,
            help="Every stream plays this file, each from its own offset. Without one, a "
            "generated clip of moving shapes (640x360, 25 fps) is played.",
        )
        cols = st.columns(3)
        streams = cols[0].slider("Streams", 1, 32, 2, help=help_of["streams"])
        seconds = cols[1].number_input(
            "Seconds", 0.5, 600.0, 5.0, step=0.5, help=help_of["seconds"]
        )
        names = sorted((spec.name for spec in backends), key=lambda name: name != DEFAULT_BACKEND)
        backend = cols[2].selectbox(
            "Backend", names, help="ONNX Runtime first: every worker has it."
        )
        cols = st.columns(3)
        realtime = cols[0].toggle("Real time", value=True, help=help_of["realtime"])
        policies: list[str] = list(DROP_POLICIES)
        drop = cols[1].selectbox(
            "When inference falls behind",
            policies,
            format_func=lambda name: DROP_POLICIES[name],
            help=help_of["drop_policy"],
        )
        cols = st.columns(3)
        max_batch = cols[0].number_input(
            "Max batch", 1, 256, 8, help="Most frames (of any streams) inferred in one batch."
        )
        timeout = cols[1].number_input(
            "Batch timeout (ms)",
            0.0,
            1000.0,
            2.0,
            step=0.5,
            help="How long a batch waits for more frames before it runs.",
        )
        cols = st.columns(3)
        capacity = cols[0].checkbox("Search the real-time capacity", help=help_of["capacity"])
        max_streams = cols[1].number_input(
            "Most streams to try", 1, 256, 16, help=help_of["max_streams"]
        )
        submitted = st.form_submit_button("Run", type="primary")
    if submitted:
        form = video.VideoForm(
            streams=int(streams),
            seconds=float(seconds),
            realtime=realtime,
            drop_policy=drop or "drop_oldest",
            max_batch_size=int(max_batch),
            timeout_ms=float(timeout),
            backend=backend,
            capacity=capacity,
            max_streams=int(max_streams),
        )
        submit(model_id, form, clip)


def submit(model_id: int, form: video.VideoForm, clip: Any) -> None:
    sent = submitting.submit(
        VIDEO, model_id, lambda: video.build_spec(state.settings(), form, clip), what="video"
    )
    if sent is not None:
        st.success(f"Video job #{sent.job_id} submitted; its streams appear below when it is done.")


def show_latest(model_id: int) -> None:
    jobs = video.video_jobs(state.session_factory(), model_id=model_id, limit=1)
    if not jobs:
        st.info(
            "No video run of this model yet. Press **Run**: it plays the streams batched "
            "across streams, then the same streams one frame at a time, and compares them. "
            "Tick the capacity search to learn how many real-time streams this machine holds."
        )
        return
    job = jobs[0]
    if job.active:
        wait_for_job(job)
        return
    if not job.succeeded or job.result is None:
        show_error(job, prefix=f"Video job #{job.id} {job.status}: ")
        return
    show_result(job.id, job.message, job.result)


@st.fragment(run_every="2s")
def wait_for_job(job: JobView[VideoJobResult]) -> None:
    jobs = video.video_jobs(state.session_factory(), model_id=job.model_id, limit=5)
    current = next((j for j in jobs if j.id == job.id), job)
    if not current.active:
        st.rerun()
    st.progress(
        min(max(current.progress, 0.0), 1.0), text=progress_text(current, prefix="Video job")
    )
    if st.button("Cancel", key=f"cancel-video-{current.id}"):
        said = cancel_job(state.session_factory(), job_id=current.id, revoke=state.revoke_task)
        st.toast(said)


def show_result(job_id: int, message: str, result: VideoJobResult) -> None:
    st.subheader(f"Video job #{job_id}")
    st.caption(message)
    capacity = video.capacity_sentence(result)
    if capacity:
        st.success(capacity)
    speedup = video.speedup_sentence(result)
    if speedup:
        st.markdown(speedup)
    st.dataframe(
        readable_frame(video.stream_rows(result)),
        hide_index=True,
        width="stretch",
        column_config={
            "offset (s)": st.column_config.NumberColumn(format="%.2f"),
            "fps": st.column_config.NumberColumn(format="%.1f"),
            "p50 (ms)": st.column_config.NumberColumn(format="%.1f"),
            "p99 (ms)": st.column_config.NumberColumn(format="%.1f"),
            "boxes per frame": st.column_config.NumberColumn(format="%.2f"),
        },
    )
    if result.batched.detector:
        st.caption(f"Detector: {result.batched.detector}.")
    st.plotly_chart(video.streams_figure(result), width="stretch", key=f"streams-{job_id}")
    facts = video.run_facts(result)
    cols = st.columns(len(facts))
    for col, (label, value) in zip(cols, facts.items(), strict=True):
        col.caption(label)
        col.markdown(value)
    pages.link(
        "compare",
        "Compare this run with other results",
        query={"results": video.compare_key(job_id, result)},
    )
    pages.link("jobs", "All jobs on the Jobs page")
