"""A comparison snapshot on screen: used by the Compare page and by the read-only shared page.

`render_shared(token)` is all a share link shows: the frozen snapshot, no navigation, no job
submission, no other data. An unknown, revoked or malformed token gets the same plain "not
found", so a link's page never tells whether it ever existed. A result deleted after the link
was made is said to be deleted; the snapshot still shows its figures as they were shared.
"""

from __future__ import annotations

import functools

import pandas as pd
import streamlit as st

from optistudio.core.report.figure_text import IDENTICAL_NOTE, figure_text
from optistudio.core.report.figures import distribution_figure, pareto_figure, throughput_figure
from optistudio.core.report.html import report_csv, report_html, report_json
from optistudio.core.report.metric_info import column_title, label_of
from optistudio.core.report.snapshot import (
    CompareSnapshot,
    decoder_note,
    environment_differences,
    missing_notes,
    missing_reason,
    pareto_title,
    shared_environment,
    table_metrics,
    table_records,
    video_note,
)
from optistudio.studio import state
from optistudio.studio.compare_services import shared_snapshot
from optistudio.studio.deletion_services import deleted_note, deleted_results
from optistudio.studio.formatting import EMPTY, header, readable_frame

NOT_FOUND = "This shared comparison was not found. It may never have existed or be withdrawn."


def render_shared(token: str) -> None:
    snapshot = shared_snapshot(state.session_factory(), token)
    if snapshot is None:
        st.title("Not found")
        st.write(NOT_FOUND)
        return
    st.title(snapshot.title)
    st.caption(
        f"Read-only snapshot shared from Optistudio, taken {snapshot.created_at}. "
        "Results stored after it do not change it."
    )
    deleted = deleted_results(state.session_factory(), snapshot)
    if note := deleted_note(deleted, len(snapshot.rows)):
        st.warning(note)
    show_snapshot(snapshot)
    download_buttons(snapshot)


def show_snapshot(snapshot: CompareSnapshot) -> None:
    """Warnings, the sweet spot, the table with directions and deltas, and the three charts
    (the Pareto view on the snapshot's own axes, so a shared page plots what its sender saw)."""
    problem = snapshot.axes_problem()
    if problem:
        st.warning(problem)
    differences = environment_differences(snapshot)
    if differences:
        st.warning(
            "**Environments differ**: these figures were not all measured alike.\n\n"
            + "\n".join(f"- {d}" for d in differences)
        )
    elif named := shared_environment(snapshot):
        st.caption(f"Measured in one environment: {named}.")
    flagged = [row.label for row in snapshot.rows if row.flags]
    if flagged:
        st.warning(
            "**Read with care**: another process took CPU (CONTENDED) or the latency never "
            "settled (UNSTABLE) while these ran; run them again on a quiet machine.\n\n"
            + "\n".join(f"- {label}" for label in flagged)
        )
    if contended := snapshot.contended_baseline():
        st.warning(f"**Deltas flagged (⚠)**: {contended}")
    sweet_spot_box(snapshot)
    styled, _ = table_frame(snapshot)
    helps = column_help(snapshot)
    config = {title: st.column_config.Column(help=text) for title, text in helps.items()}
    st.dataframe(styled, hide_index=True, width="stretch", column_config=config)
    x, y = label_of(snapshot.latency_metric), label_of(snapshot.quality_metric)
    st.caption(
        "↓ lower is better, ↑ higher is better; best value per column in green. Δ is the change "
        f"against the baseline (⚑). ◆ on the Pareto frontier of {x} and {y}, ★ sweet spot. "
        "Error is 1 − mean cosine of each variant against its own original (the original: 0); "
        "an original scores itself as exact on its variants' agreement metrics. Differences "
        "that do not matter crown nobody: accuracy within 1e-6 (or equal at the 4 digits "
        "shown) is a tie, and so is latency within its measurement's noise (2 % at least); on "
        f"a tie in accuracy the faster result wins. {IDENTICAL_NOTE}."
    )
    for note in (video_note(snapshot), decoder_note(snapshot), *missing_notes(snapshot)):
        if note:
            st.caption(note)
    st.subheader(pareto_title(snapshot))
    st.plotly_chart(pareto_figure(snapshot), width="stretch")
    left, right = st.columns(2)
    left.subheader("Throughput vs p99 latency")
    left.plotly_chart(throughput_figure(snapshot), width="stretch")
    right.subheader("Latency spread")
    right.plotly_chart(distribution_figure(snapshot), width="stretch")
    right.caption("Box p10–p90 with the p50 line, whiskers min–p99, from the stored percentiles.")
    with st.expander("Where the accuracy figures come from"):
        st.dataframe(accuracy_sources(snapshot), hide_index=True, width="stretch")


def accuracy_sources(snapshot: CompareSnapshot) -> pd.DataFrame:
    """Where each result's accuracy figures come from (its note; '—' when it has none)."""
    return readable_frame(
        {"result": r.label, "accuracy": r.accuracy_note or None} for r in snapshot.rows
    )


def sweet_spot_box(snapshot: CompareSnapshot) -> None:
    if snapshot.budget_ms is None:
        return
    index = snapshot.sweet_spot()
    latency, quality = snapshot.latency_metric, snapshot.quality_metric
    if index is None:
        st.info(f"Nothing selected has a {label_of(latency)} within {snapshot.budget_ms:g} ms.")
        return
    row = snapshot.rows[index]
    score = snapshot.value(row, quality)
    st.success(
        f"**Sweet spot within {snapshot.budget_ms:g} ms**: {row.label}, {label_of(latency)} "
        f"{snapshot.value(row, latency):.3f} ms"
        + (f", {label_of(quality)} {score:.4g}" if score is not None else ", no accuracy figures")
    )


def styled_table(snapshot: CompareSnapshot) -> pd.io.formats.style.Styler:
    """One row per result; a value column per metric (and its Δ), best cells in green, a dash
    where a result has no figure (`missing_notes` says why, under the table)."""
    return table_frame(snapshot)[0]


def table_frame(snapshot: CompareSnapshot) -> tuple[pd.io.formats.style.Styler, pd.DataFrame]:
    """The styled table and the frame under it: every cell text, '—' where a figure is
    missing (Streamlit would draw None as the word), Δ headers marked ⚠ against a baseline
    that ran contended."""
    records = table_records(snapshot)
    metrics = [m for m in table_metrics(snapshot) if any(r[m] is not None for r in records)]
    flagged = " ⚠" if snapshot.contended_baseline() else ""
    table = pd.DataFrame(
        {
            "": ["⚑" * r["baseline"] + "◆" * r["pareto"] + "★" * r["sweet spot"] for r in records],
            "result": [r["result"] for r in records],
        }
    )
    best = pd.DataFrame(False, index=table.index, columns=table.columns)
    for metric in metrics:
        title = column_title(metric)
        table[title] = [_number(metric, r[metric]) for r in records]
        best[title] = [r[f"{metric} best"] for r in records]
        if snapshot.baseline is not None:
            table[f"Δ {delta_name(metric)}{flagged}"] = [
                EMPTY if r[f"{metric} delta"] is None else f"{r[f'{metric} delta']:+.1%}"
                for r in records
            ]
    best = best.reindex(columns=table.columns, fill_value=False)
    return table.style.apply(lambda _: best.map(_green), axis=None), table


def column_help(snapshot: CompareSnapshot) -> dict[str, str]:
    """Each value column's tooltip: why some of its cells read '—' (none when all have one)."""
    helps = {}
    for metric in table_metrics(snapshot):
        missing = {
            missing_reason(row, metric)
            for row in snapshot.rows
            if snapshot.value(row, metric) is None
        }
        if missing:
            helps[column_title(metric)] = "— : " + "; ".join(sorted(missing))
    return helps


def delta_name(metric: str) -> str:
    """The Δ column's name: the metric's short label ('p50', 'string agreement')."""
    label = label_of(metric)
    return header(label.removesuffix(" latency") if label != metric else metric)


def _number(metric: str, value: float | None) -> str:
    return EMPTY if value is None else figure_text(metric, value)


def _green(is_best: bool) -> str:
    return "background-color: #d9f2d9; font-weight: 600" if is_best else ""


REPORTS = (
    ("Download report (HTML)", report_html, "html", "text/html"),
    ("Download CSV", report_csv, "csv", "text/csv"),
    ("Download JSON", report_json, "json", "application/json"),
)


def download_buttons(snapshot: CompareSnapshot) -> None:
    """HTML report (Plotly inlined, works offline), CSV and JSON; built only when clicked."""
    for column, (label, write, suffix, mime) in zip(st.columns(3), REPORTS, strict=True):
        column.download_button(
            label,
            data=functools.partial(write, snapshot),
            file_name=f"optistudio-report.{suffix}",
            mime=mime,
            on_click="ignore",
        )
