"""Compare: interleaved A/B runs of two models, with the ratio's interval and a verdict."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st
from pydantic import ValidationError

from core.compare import ComparisonSpec
from core.errors import OptistudioError, describe_validation_error
from optistudio.jobspecs import CompareJobSpec
from studio import charts, state
from studio.services import comparison_rows, model_choices, submit_comparison

HELP = {name: field.description for name, field in ComparisonSpec.model_fields.items()}
DEFAULTS = ComparisonSpec()


def render() -> None:
    st.title("Compare")
    st.caption(
        "A and B run alternately in one worker process (A B, B A, …), so noise from the machine "
        "hits both alike. The result is the median of the per-pair latency ratios B/A with a "
        "bootstrap confidence interval; a winner is named only when the whole interval lies "
        f"beyond the {DEFAULTS.min_effect:.0%} margin."
    )
    choices = model_choices(state.session_factory())
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
    try:
        spec = CompareJobSpec(
            candidate_model_id=candidate,
            batch_size=int(batch),
            threads=int(threads) or None,
            min_seconds=float(min_seconds),
            max_seconds=float(max_seconds),
        )
    except ValidationError as exc:
        st.error(f"Check the comparison settings: {describe_validation_error(exc)}")
        return
    try:
        queue = state.route_to(spec.backend, spec.device)
    except OptistudioError as exc:
        st.error(str(exc))
        return
    job_id = submit_comparison(
        state.session_factory(), spec=spec, baseline_id=baseline, send=state.sender(queue)
    )
    st.success(f"Comparison job #{job_id} submitted. Its result appears below when it is done.")
    st.markdown("[Follow it on the Jobs page →](/jobs)")


@st.fragment(run_every="2s")
def show_comparisons() -> None:
    rows = comparison_rows(state.session_factory())
    if not rows:
        st.info("No comparisons yet.")
        return
    st.subheader("Results")
    table = pd.DataFrame(
        [
            {
                "job": r["job"],
                "A": r["A"],
                "B": r["B"],
                "batch": r["batch"],
                "B/A ratio": round(r["ratio"], 4),
                "95 % interval": f"{r['low']:.3f} – {r['high']:.3f}",
                "verdict": r["verdict"] + (", contended" if r["contended"] else ""),
                "pairs": r["pairs"],
            }
            for r in rows
        ]
    )
    st.dataframe(table, hide_index=True, width="stretch")
    latest = rows[0]
    st.markdown(f"**Latest:** {latest['sentence']}")
    st.plotly_chart(charts.ratio_intervals(rows[:15]), width="stretch")
