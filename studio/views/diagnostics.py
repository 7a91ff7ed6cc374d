"""Diagnostics: per-operator profile, why INT8 is not faster, per-layer error, memory soak."""

from __future__ import annotations

from typing import Any

import streamlit as st

from optistudio.core.diagnose.operator_profile import OperatorProfile, OperatorProfileSpec
from optistudio.core.diagnose.profile_compare import ProfileComparison
from optistudio.core.measure.soak import SoakReport, SoakSpec
from optistudio.db.models import JobKind
from optistudio.services.catalog import store_dataset
from optistudio.services.jobkinds import OPERATOR_PROFILE, SOAK, OperatorProfileJobSpec
from optistudio.services.jobresults import OperatorProfileJobResult
from optistudio.studio import diagnostics_services as diag
from optistudio.studio import state, submitting
from optistudio.studio.backend_choices import backend_choices
from optistudio.studio.errors import show_error
from optistudio.studio.formatting import readable_frame
from optistudio.studio.job_status import progress_text
from optistudio.studio.job_view import JobView
from optistudio.studio.jobs_services import BadSetting
from optistudio.studio.model_picker import chosen_model
from optistudio.studio.views.optimize import image_inputs

SEVERITY_ICONS = {
    "high": ":material/error:",
    "medium": ":material/warning:",
    "info": ":material/info:",
}
POST_STEPS = ["softmax", "sigmoid", "argmax", "top5"]
SOAK_HELP = {name: field.description for name, field in SoakSpec.model_fields.items()}


def render() -> None:
    st.title("Diagnostics")
    st.caption(
        "Where a model spends its time, operator by operator, from the runtime's own profiler; "
        "why an INT8 variant is not faster; which layers quantization hurts most; and whether "
        "memory grows over a long run."
    )
    chosen = chosen_model("Add a model on the Models page first, then profile it here.")
    if chosen is None:
        return
    model_id = chosen["id"]
    profile_tab, soak_tab = st.tabs(["Operator profile", "Memory soak"])
    with profile_tab:
        operator_profile_form(model_id)
        show_operator_profiles(model_id)
    with soak_tab:
        soak_form(model_id)
        show_soaks(model_id)


def operator_profile_form(model_id: int) -> None:
    variants = diag.variant_choices(state.session_factory(), model_id=model_id)
    labels = {v["id"]: v["label"] for v in variants}
    upload_mb = state.settings().max_upload_mb
    with st.form("profile"):
        cols = st.columns([3, 2, 1, 1])
        variant = cols[0].selectbox(
            "Compare with a variant (optional)",
            [None, *labels],
            format_func=lambda i: "No variant: profile this model only" if i is None else labels[i],
            help="Pick its INT8 variant to see, op by op, what got faster or slower, and why.",
        )
        backend = cols[1].selectbox(
            "Backend",
            backend_choices(state.live_targets(), OperatorProfileSpec),
            help=OperatorProfileSpec.model_fields["backend"].description,
        )
        batch = cols[2].number_input("Batch", 1, 1024, 1)
        runs = cols[3].number_input("Runs", 1, 10_000, 30, help="Profiled runs after warm-up.")
        with st.expander("Pipeline around the model (timed stage by stage)"):
            images = st.checkbox("Time image pre-processing before the model", value=False)
            pre_settings = image_inputs()
            pre = pre_settings if images else None
            image_zip = st.file_uploader(
                "Images (.zip; empty = synthetic 640x480)", type=["zip"], max_upload_size=upload_mb
            )
            post = st.multiselect("Post-processing of the first output", POST_STEPS)
        data = st.file_uploader(
            "Data for the per-layer error (.npz, optional; empty = synthetic inputs)",
            type=["npz"],
            max_upload_size=upload_mb,
        )
        submitted = st.form_submit_button("Profile", type="primary")
    if submitted:
        form = {"variant": variant, "backend": backend, "batch": batch, "runs": runs}
        submit_operator_profile(model_id, form | {"pre": pre, "post": post}, image_zip, data)


def submit_operator_profile(model_id: int, form: dict[str, Any], image_zip: Any, data: Any) -> None:
    settings = state.settings()

    def spec() -> OperatorProfileJobSpec:
        return OperatorProfileJobSpec(
            backend=form["backend"],
            batch_size=int(form["batch"]),
            runs=int(form["runs"]),
            variant_model_id=form["variant"],
            image_preprocessing=form["pre"],
            postprocessing=form["post"],
            images_path=str(store_dataset(settings, image_zip, filename=image_zip.name))
            if image_zip and form["pre"]
            else None,
            data_path=str(store_dataset(settings, data, filename=data.name)) if data else None,
        )

    sent = submitting.submit(OPERATOR_PROFILE, model_id, spec, what="profile")
    if sent is not None:
        st.success(
            f"Profile job #{sent.job_id} submitted. Its result appears below when it is done."
        )


def soak_form(model_id: int) -> None:
    with st.form("soak"):
        cols = st.columns(3)
        seconds = cols[0].number_input("Seconds", 1.0, 86_400.0, 30.0, help=SOAK_HELP["seconds"])
        backend = cols[1].selectbox(
            "Backend",
            backend_choices(state.live_targets(), SoakSpec),
            key="soak_backend",
            help=SOAK_HELP["backend"],
        )
        batches = cols[2].text_input("Batch sizes cycled", "1, 2, 4, 8")
        submitted = st.form_submit_button("Start soak", type="primary")
    if not submitted:
        return

    def spec() -> SoakSpec:
        return SoakSpec(seconds=seconds, backend=backend, batch_sizes=cycled_sizes(batches))

    sent = submitting.submit(SOAK, model_id, spec, what="soak")
    if sent is not None:
        st.success(f"Soak job #{sent.job_id} submitted; it runs for {seconds:g} s.")


def cycled_sizes(text: str) -> list[int]:
    """'1, 2, 4' -> [1, 2, 4]; text that is not integers is a BadSetting saying why."""
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise BadSetting(str(exc)) from None


@st.fragment(run_every="3s")
def show_operator_profiles(model_id: int) -> None:
    job = _latest(
        JobKind.operator_profile,
        model_id,
        "No profile of this model yet. Press **Profile** above; with an INT8 variant picked, "
        "the page also explains where INT8 gains or loses time.",
    )
    if job is None:
        return
    result: OperatorProfileJobResult = job.result
    st.subheader(f"Profile job #{job.id}")
    st.caption(job.message)
    show_profile(result.profile, title=result.profile.model)
    if result.variant is not None:
        show_profile(result.variant, title=f"Variant: {result.variant_name}")
    if result.comparison is not None:
        show_comparison(result.comparison)
    show_findings(result)
    show_layer_errors(result)
    show_breakdown(result, model_id)


def _latest(kind: JobKind, model_id: int, empty: str) -> JobView[Any] | None:
    """The newest job of `kind` for the model when it has a result; else the empty state, its
    progress or its failure is shown and None returned."""
    jobs = diag.diagnostic_jobs(state.session_factory(), kind=kind, model_id=model_id, limit=1)
    if not jobs:
        st.info(empty)
        return None
    return jobs[0] if _finished(jobs[0]) else None


def _finished(job: JobView[Any]) -> bool:
    """Progress or the failure of the newest job; True when it has a result to show."""
    if job.active:
        st.progress(min(max(job.progress, 0.0), 1.0), text=progress_text(job))
        return False
    if not job.succeeded or not job.result:
        show_error(job, prefix=f"Job #{job.id} {job.status}: ")
        return False
    return True


def show_profile(profile: OperatorProfile, *, title: str) -> None:
    st.markdown(
        f"**{title}** on {profile.backend}, batch {profile.batch_size}"
        + "".join(f", {name} {shape}" for name, shape in profile.input_shapes.items())
        + f": {profile.plain_ms:.3f} ms per inference; profiling made runs "
        f"{profile.overhead:.2f}x as long."
    )
    left, right = st.columns([3, 2])
    left.dataframe(
        diag.top_nodes_frame(profile),
        hide_index=True,
        width="stretch",
        column_config={"share": st.column_config.ProgressColumn("share", format="percent")},
    )
    right.plotly_chart(diag.op_type_figure(profile), width="stretch", key=f"ops-{title}")


def show_comparison(comparison: ProfileComparison) -> None:
    st.subheader("FP32 vs variant, per op family")
    st.caption(
        f"{comparison.b_model} takes {comparison.ratio:.2f}x the time of "
        f"{comparison.a_model} ({comparison.b_ms:.3f} vs {comparison.a_ms:.3f} ms)."
    )
    st.plotly_chart(diag.comparison_figure(comparison), width="stretch", key="comparison")
    if len(comparison.families) > diag.TOP_FAMILIES:
        st.caption(
            f"The chart shows the {diag.TOP_FAMILIES} slowest op families; the table lists all "
            f"{len(comparison.families)}."
        )
    st.dataframe(diag.comparison_frame(comparison), hide_index=True, width="stretch")
    names = [n.graph_node or n.node for n in comparison.not_in_precision]
    if names:
        st.warning(diag.not_in_precision_line(names, comparison.expected_precision))
        if len(names) > diag.NAMES_SHOWN:
            with st.expander(f"All {len(names)} nodes not in {comparison.expected_precision}"):
                st.dataframe(readable_frame({"node": name} for name in names), hide_index=True)


def show_findings(result: OperatorProfileJobResult) -> None:
    st.subheader("Why INT8 is (not) faster")
    for note in result.notes:
        st.info(note)
    if result.explained and not result.findings:
        st.success(f"No rule fired for {result.explained}: nothing stands in INT8's way here.")
    for finding in result.findings:
        with st.container(border=True):
            st.markdown(f"{SEVERITY_ICONS[finding.severity]} **{finding.title}**")
            st.write(finding.detail)
            st.markdown(f"**Try:** {finding.suggestion}")


def show_layer_errors(result: OperatorProfileJobResult) -> None:
    st.subheader("Per-layer quantization error")
    rows = result.layer_errors
    if not rows:
        st.info(result.layer_error_note or "Pick an INT8 variant to see per-layer error.")
        return
    st.caption(
        "Ranked by the noise each layer adds (the ranking int8_mixed uses to keep layers in "
        "float). A node without a name is labelled by its op type and graph index; long names "
        f"are shortened, and the last column holds them whole. {result.layer_error_note}"
    )
    st.plotly_chart(diag.layer_error_figure(rows), width="stretch", key="layers")
    if len(rows) > diag.TOP_LAYERS:
        st.caption(
            f"The chart shows the {diag.TOP_LAYERS} layers that add the most noise, and "
            f"{len(rows) - diag.TOP_LAYERS} more are in the table."
        )
    st.dataframe(
        diag.layer_error_frame(rows),
        hide_index=True,
        width="stretch",
        column_config={"full name": st.column_config.TextColumn(width="large")},
    )


def show_breakdown(result: OperatorProfileJobResult, model_id: int) -> None:
    st.subheader("Where a request's time goes")
    wait = diag.queue_wait(state.session_factory(), model_id=model_id)
    frame = diag.breakdown_frame(result.breakdown, wait)
    st.plotly_chart(diag.breakdown_figure(frame), width="stretch", key="stages")
    st.dataframe(frame, hide_index=True, width="stretch")
    for note in result.breakdown.notes if result.breakdown is not None else []:
        st.caption(note)
    if wait is None:
        st.caption(
            "Queue wait comes from a dynamic-batching run of this model: none is stored yet, "
            "so it is not shown."
        )


@st.fragment(run_every="3s")
def show_soaks(model_id: int) -> None:
    job = _latest(
        JobKind.soak,
        model_id,
        "No soak of this model yet. A soak runs it for a while over several batch sizes and "
        "says whether memory grows per inference.",
    )
    if job is None:
        return
    result: SoakReport = job.result
    show = {"leak suspected": st.error, "stable": st.success}.get(result.verdict, st.info)
    show(f"Job #{job.id}: {result.sentence}")
    st.plotly_chart(diag.soak_figure(result), width="stretch", key="soak")
    st.caption(
        f"{result.inferences:,} inferences in {result.duration_s:.1f} s over shapes "
        f"{', '.join(str(v) for v in result.variants)}. GPU memory: {result.gpu_memory}."
    )
