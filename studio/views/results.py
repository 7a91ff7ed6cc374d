"""Results: stored benchmark figures as a table and charts."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from optistudio.studio import cached, charts, state
from optistudio.studio.decoder_rows import RESULTS_COLUMNS
from optistudio.studio.formatting import readable_frame
from optistudio.studio.optimize_services import variants_table
from optistudio.studio.results_services import decoder_benchmarks as decoder_benchmarks_of
from optistudio.studio.results_services import display_table, side_by_side, tolerance_note


def render() -> None:
    st.title("Results")
    choices = cached.model_choices()
    options = [None] + [c["id"] for c in choices]
    names = {c["id"]: f"#{c['id']} · {c['name']}" for c in choices}
    wanted = st.query_params.get("model")
    default = int(wanted) if wanted and wanted.isdigit() and int(wanted) in names else None
    model_id = st.selectbox(
        "Model",
        options,
        index=options.index(default),
        format_func=lambda i: "All models" if i is None else names[i],
    )
    if model_id is None:
        st.query_params.pop("model", None)
    else:
        st.query_params["model"] = str(model_id)
    shown = model_id is not None and variants_of(model_id)
    shown = decoder_benchmarks(model_id) or shown
    wide = cached.results_frame(model_id)
    if wide.empty:
        if not shown:  # a decoder's benchmark and variants store no measurement rows
            st.info("No results yet. Pick a model on the Models page and press **Benchmark**.")
        return
    if model_id is not None:
        backends_side_by_side(wide)
    st.subheader("Every measurement")
    contended_note(wide)
    st.dataframe(readable_frame(display_table(wide)), hide_index=True, width="stretch")
    st.caption(
        "p50 ± half the p10–p90 spread. 'unstable' means the windows never agreed "
        "within the tolerance before the time cap."
    )
    drawn = charts.latest_runs(wide)
    runs = wide["job_id"].nunique()
    st.subheader("Latency percentiles per batch size")
    if runs > charts.CHART_RUNS:
        st.caption(
            f"The charts draw the latest {charts.CHART_RUNS} of these {runs} runs; the table "
            "above lists them all. Pick a model to chart its own."
        )
    st.plotly_chart(charts.latency_by_batch(drawn), width="stretch")
    st.subheader("Throughput per batch size")
    st.plotly_chart(charts.throughput_by_batch(drawn), width="stretch")


def decoder_benchmarks(model_id: int | None) -> bool:
    """Benchmarks of decoders: TTFT per prompt length and tokens/s per batch size; whether
    there were any."""
    runs = decoder_benchmarks_of(state.session_factory(), model_id=model_id, limit=3)
    for run in runs:
        st.subheader(f"Decoding · job #{run.job.id} · {run.job.model}")
        st.caption(
            f"Measured on {run.measured_on}. Greedy decoding after a short prompt; TTFT is "
            "the median time from a prompt of that length to its first token, at batch 1."
        )
        left, right = st.columns(2)
        left.markdown("**Greedy decoding**")
        left.dataframe(readable_frame(run.decode), hide_index=True, width="stretch")
        right.markdown("**Time to first token (batch 1)**")
        right.dataframe(readable_frame(run.prefill), hide_index=True, width="stretch")
    return bool(runs)


def contended_note(wide: pd.DataFrame) -> None:
    """Say above the table when figures were measured while other processes used the CPU."""
    if "contended" not in wide:
        return
    busy = int((wide["contended"].fillna(0.0) >= 0.5).sum())
    if busy:
        st.warning(
            f"{busy} of these {len(wide)} measurements were taken while other processes used "
            "the CPU ('contended' in the verdict column; open diamonds in the charts), so they "
            "read slower than this machine runs the model. Benchmark again on a quiet machine."
        )


def variants_of(model_id: int) -> bool:
    """The latest optimization run of this model: its variants beside the original; whether
    there was one."""
    runs = cached.optimization_runs(model_id, limit=1)
    if not runs:
        return False
    latest = runs[0]
    st.subheader("Optimized variants")
    st.caption(f"From optimize job #{latest.id}. {latest.message}")
    columns = [
        "recipe",
        "chosen",
        "backend",
        "precision",
        "speedup",
        "speedup CI",
        "mean cosine",
        *RESULTS_COLUMNS,
        "within budget",
        "error",
    ]
    table = variants_table(latest.variants, latest.task_name, latest.task_metrics)
    st.dataframe(
        table[[c for c in columns if c in table]],
        hide_index=True,
        width="stretch",
        column_config={"chosen": st.column_config.CheckboxColumn("best")},
    )
    return True


def backends_side_by_side(wide: pd.DataFrame) -> None:
    """The latest run of each backend · device · precision of this model, with its output check."""
    table = side_by_side(wide)
    st.subheader("Backends side by side")
    if len(table) < 2:
        st.caption(
            "One target measured so far. On the Models page, **Run on every target** "
            "benchmarks this model on each backend and precision the workers offer."
        )
    st.dataframe(readable_frame(table), hide_index=True, width="stretch")
    st.caption(tolerance_note())
    if len(table) >= 2:
        latency = [c for c in table.columns if c.startswith("p50 at batch")][0]
        st.plotly_chart(charts.targets_bar(table, latency), width="stretch")
