"""Compare: stored results side by side (Pareto view, share, report) and interleaved A/B runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import streamlit as st

from optistudio.core.backends.coreml_backend import RUNS_ON as CORE_ML_RUNS_ON
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.report.metric_info import column_title
from optistudio.core.report.snapshot import CompareSnapshot, axis_choices
from optistudio.services.jobkinds import COMPARE, EXPORT, CompareJobSpec, ExportJobSpec
from optistudio.studio import cached, charts, pages, state, submitting
from optistudio.studio.auth import share_owner
from optistudio.studio.compare_services import (
    Selection,
    build_snapshot,
    comparison_table,
    export_rows,
    fit_axes,
    owned_shares,
    read_selection,
    revoke,
    share_snapshot,
    write_selection,
)
from optistudio.studio.share_view import download_buttons, show_snapshot

HELP = {name: field.description for name, field in ComparisonSpec.model_fields.items()}
DEFAULTS = ComparisonSpec()


def render() -> None:
    st.title("Compare")
    side_by_side()
    st.divider()
    choices = cached.model_choices()  # read once: the export and A/B forms
    export_section(choices)
    st.divider()
    st.subheader("Head-to-head run")
    st.caption(
        "A and B run alternately in one worker process (A B, B A, …), so noise from the machine "
        "hits both alike. The result is the median of the per-pair latency ratios B/A with a "
        "bootstrap confidence interval; a winner is named only when the whole interval lies "
        f"beyond the {DEFAULTS.min_effect:.0%} margin."
    )
    if len(choices) < 1:
        st.info("Add a model on the Models page first; then compare it with a variant or itself.")
    else:
        comparison_form(choices)
    show_comparisons()


def comparison_form(choices: list[dict[str, Any]]) -> None:
    names = {c["id"]: f"#{c['id']} · {c['name']}" for c in choices}
    ids = list(names)
    with st.form("compare"):
        left, right = st.columns(2)
        baseline = left.selectbox("A (baseline)", ids, format_func=names.get)
        candidate = right.selectbox(
            "B (candidate)", ids, index=min(1, len(ids) - 1), format_func=names.get
        )
        cols = st.columns(4)
        batch = cols[0].number_input("Batch size", 1, 4096, 1, help=HELP["batch_size"])
        threads = cols[1].number_input("Threads (0 = default)", 0, 256, 0, help=HELP["threads"])
        min_seconds = cols[2].number_input(
            "Min seconds", 0.0, 3600.0, DEFAULTS.min_seconds, help=HELP["min_seconds"]
        )
        max_seconds = cols[3].number_input(
            "Max seconds", 0.1, 3600.0, DEFAULTS.max_seconds, help=HELP["max_seconds"]
        )
        submitted = st.form_submit_button("Compare", type="primary")
    if not submitted:
        return

    def spec() -> CompareJobSpec:
        return CompareJobSpec(
            candidate_model_id=candidate,
            batch_size=int(batch),
            threads=int(threads) or None,
            min_seconds=float(min_seconds),
            max_seconds=float(max_seconds),
        )

    sent = submitting.submit(COMPARE, baseline, spec, what="comparison")
    if sent is None:
        return
    st.success(
        f"Comparison job #{sent.job_id} submitted. Its result appears below when it is done."
    )
    pages.link("jobs", "Follow it on the Jobs page")


@st.fragment(run_every="2s")
def show_comparisons() -> None:
    rows = cached.comparison_rows()
    if not rows:
        st.info("No comparisons yet.")
        return
    st.subheader("Results")
    st.dataframe(comparison_table(rows), hide_index=True, width="stretch")
    latest = rows[0]
    st.markdown(f"**Latest:** {latest['sentence']}")
    st.plotly_chart(charts.ratio_intervals(rows[:15]), width="stretch")


# -- stored results side by side ------------------------------------------------------------

SELECTED = "compare_selected"


def side_by_side() -> None:
    st.subheader("Stored results side by side")
    factory = state.session_factory()
    options = cached.result_options()
    wanted = read_selection(st.query_params)
    for problem in wanted.problems:
        st.warning(problem)
    if not options:
        st.info(
            "No stored results yet. Benchmark a model on the Models page (or "
            "`optistudio bench model.onnx --save`), or play video on it on the Video page; "
            "its results can then be picked here."
        )
        return
    gone = [key for key in wanted.keys if key not in options]
    if gone:
        st.warning(
            f"{len(gone)} result(s) in the link are not stored (deleted, or never existed) and "
            f"were left out: {', '.join(gone[:5])}{' …' if len(gone) > 5 else ''}"
        )
    selection = pick(options, wanted)
    write_selection(st.query_params, selection)
    if not selection.keys:
        st.info("Pick results above (two or more) to see them side by side.")
        return
    snapshot, _ = build_snapshot(factory, selection, title=_title(selection, options))
    if not snapshot.rows:
        st.info("None of the picked results has figures stored.")
        return
    for problem in fit_axes(snapshot, selection):
        st.warning(problem)
    pick_axes(snapshot, selection)
    write_selection(st.query_params, selection)
    show_snapshot(snapshot)
    share_and_download(snapshot)


def pick(options: dict[str, str], wanted: Selection) -> Selection:
    """The widgets: results, baseline and latency budget, first filled from the URL."""
    current = st.session_state.get(SELECTED, wanted.keys)  # the URL fills it on first render
    st.session_state[SELECTED] = [key for key in current if key in options]  # drop deleted ones
    keys = st.multiselect(
        "Results",
        list(options),
        format_func=options.get,
        key=SELECTED,
        filter_mode="contains",  # typing 'resnet' lists only labels holding it, never a fuzzy
        # match from another model that Enter would add unasked
        placeholder="Pick stored results (model · backend · batch · threads)",
        help="Benchmark results, and each optimize variant as its optimize run timed it "
        "against its original ('optimize run': p50 and speedup only, no second benchmark).",
    )
    left, right = st.columns(2)
    baselines = [None, *keys]
    baseline = left.selectbox(
        "Baseline for the deltas",
        baselines,
        index=baselines.index(wanted.baseline) if wanted.baseline in keys else 0,
        format_func=lambda k: "none" if k is None else options[k],
    )
    budget = right.number_input(
        "Latency budget (ms on the chart's latency axis; 0 = none)",
        min_value=0.0,
        value=float(wanted.budget_ms or 0.0),
        step=0.5,
        help="The sweet spot is the most accurate result within it, then the fastest.",
    )
    return Selection(
        keys=list(keys),
        baseline=baseline,
        budget_ms=budget or None,
        latency_metric=wanted.latency_metric,
        quality_metric=wanted.quality_metric,
    )


def pick_axes(snapshot: CompareSnapshot, selection: Selection) -> None:
    """The Pareto chart's two axes, from the metrics the picked results have; the choice goes
    into the selection (so the URL) and the snapshot (so a share link and the report)."""
    latencies, qualities = axis_choices(snapshot)
    left, right = st.columns(2)
    latency = left.selectbox(
        "Chart: latency axis (x)",
        latencies,
        index=latencies.index(selection.latency_metric),
        format_func=column_title,
        help="The latency budget and the sweet spot use this latency too.",
    )
    quality = right.selectbox(
        "Chart: accuracy axis (y)",
        qualities,
        index=qualities.index(selection.quality_metric),
        format_func=column_title,
        help="Every accuracy metric a picked result has: error vs the original, top-1, and the "
        "task metrics its optimize run measured (string agreement, mAP, ...).",
    )
    selection.latency_metric = snapshot.latency_metric = latency
    selection.quality_metric = snapshot.quality_metric = quality


def _title(selection: Selection, options: dict[str, str]) -> str:
    names = (options[k].split(" · ")[0].split(" ", 1)[-1] for k in selection.keys)
    models = sorted({re.sub(r" \[[^\]]*\]$", "", name) for name in names})  # no [precision]
    shown = ", ".join(models[:3]) + (f" and {len(models) - 3} more" if len(models) > 3 else "")
    return f"{len(selection.keys)} results: {shown}"


def share_and_download(snapshot: Any) -> None:
    st.subheader("Share and download")
    download_buttons(snapshot)
    if st.button("Share", help="Freeze this view into a read-only link anyone can open."):
        token = share_snapshot(state.session_factory(), snapshot, owner=current_owner())
        st.success("Share link created. It shows this snapshot only; revoke it below any time.")
        st.code(share_url(token), language=None)
    my_shares()


def share_url(token: str) -> str:
    base = (st.context.url or "").split("?")[0].rstrip("/")
    for suffix in ("/compare",):
        base = base.removesuffix(suffix)
    return f"{base}/?share={token}"


def current_owner() -> str:
    """Who owns new share links: the signed-in account's subject at its identity provider
    (auth.share_owner) when OpenID Connect is set up, else 'local'; "" is nobody."""
    user = st.user
    if getattr(user, "is_logged_in", False):
        return share_owner(user.to_dict())
    return "local"


def my_shares() -> None:
    owner = current_owner()
    shares = owned_shares(state.session_factory(), owner=owner) if owner else []
    if not shares:
        return
    with st.expander(f"Your share links ({len(shares)})"):
        for entry in shares:
            cols = st.columns([6, 2])
            state_text = "revoked" if entry["revoked"] else "live"
            cols[0].markdown(
                f"`…{entry['token'][-8:]}` · {entry['title']} · {entry['results']} results · "
                f"{entry['created']:%Y-%m-%d %H:%M} · **{state_text}**"
            )
            if not entry["revoked"] and cols[1].button("Revoke", key=f"revoke-{entry['token']}"):
                revoke(state.session_factory(), token=entry["token"], owner=current_owner())
                st.toast("Share link revoked: it now shows 'not found'.")


# -- export bundles -------------------------------------------------------------------------


def export_section(choices: list[dict[str, Any]]) -> None:
    st.subheader("Export a deployable bundle")
    st.caption(
        "A worker writes a zip with the model, the recipe that reproduces it, accuracy and "
        "benchmark reports, pipeline.json, a Triton model repository, OpenVINO IR, Core ML "
        "packages (FP32, FP16, INT8 weights, made on a worker with the coreml extra; Core ML "
        f"{CORE_ML_RUNS_ON}) and SHA-256 checksums. No TensorRT engine: none of the workers "
        "has TensorRT. Same as "
        "`optistudio export MODEL_ID --out bundle.zip`."
    )
    names = {c["id"]: f"#{c['id']} · {c['name']}" for c in choices}
    model_id = st.selectbox("Model or variant", list(names), format_func=names.get)
    if st.button("Build bundle", disabled=model_id is None):
        sent = submitting.submit(EXPORT, model_id, ExportJobSpec)
        if sent is not None:
            st.success(
                f"Export job #{sent.job_id} submitted; its download appears below when done."
            )
    show_exports()


@st.fragment(run_every="3s")
def show_exports() -> None:
    for job in export_rows(state.session_factory()):
        made = job.result
        bundle = Path(made.bundle if made and made.bundle else "")
        cols = st.columns([5, 2])
        model = job.model or "deleted model"
        cols[0].markdown(f"Export job #{job.id} · {model}: {job.message}")
        if made and made.bundle and bundle.is_file():
            cols[1].download_button(
                f"Download bundle #{job.id} ({made.size_bytes / 1e6:.1f} MB)",
                data=bundle.read_bytes,  # read when clicked, once; the worker streamed it to disk
                file_name=bundle.name,
                mime="application/zip",
                on_click="ignore",
                key=f"bundle-{job.id}",
            )
        else:
            cols[1].caption("The bundle file is gone; build it again.")
