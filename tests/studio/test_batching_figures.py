"""The Batching page's charts without Streamlit: readable axes, labels where there is room."""

from __future__ import annotations

from optistudio.core.batching.latency import LatencyProfile
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.simulate import simulate
from optistudio.core.batching.tuner import capacity, recommend
from optistudio.studio import batching_figures as figures
from optistudio.studio import batching_whatif as whatif

PROFILE = LatencyProfile(batch_sizes=[1, 2, 4, 8], mean_ms=[2.0, 2.5, 3.5, 6.0])


def test_rate_sweep_and_figures_cover_the_range() -> None:
    settings = BatchingSettings(max_batch_size=8, timeout_ms=2)
    frame = whatif.rate_sweep(PROFILE, settings)

    assert len(frame) == whatif.SWEEP_POINTS
    assert frame["rate"].iloc[-1] > capacity(PROFILE, settings)
    assert len(figures.sweep_figure(frame, 300).data) == 3
    assert len(figures.profile_figure(PROFILE).data) == 2


def test_candidates_figure_marks_the_pick() -> None:
    advice = recommend(PROFILE, p99_budget_ms=20, rate=500, max_batch_size=8)
    figure = figures.candidates_figure(advice)
    assert figure.data[-1].name == "recommended"


def test_candidates_figure_sets_apart_settings_without_headroom() -> None:
    one_ms = LatencyProfile(batch_sizes=[1], mean_ms=[1.0])
    nominal = simulate(
        one_ms, BatchingSettings(max_batch_size=1, timeout_ms=0), rate=800, requests=4000
    )
    advice = recommend(one_ms, p99_budget_ms=nominal.p99_ms * 1.1, rate=800, max_batch_size=1)

    figure = figures.candidates_figure(advice)

    names = [trace.name for trace in figure.data]
    assert names == ["only at the profiled speed (not 10% slower)", "recommended"]
    assert "with the model 10% slower" in figure.data[0].hovertext[0]


def test_the_settings_tried_are_labelled_where_there_is_room() -> None:
    advice = recommend(PROFILE, p99_budget_ms=20, rate=500, max_batch_size=8)

    figure = figures.candidates_figure(advice)

    tried = [trace for trace in figure.data if trace.name != "recommended"]
    points = [
        (text, hover, x, y)
        for trace in tried
        for text, hover, x, y in zip(trace.text, trace.hovertext, trace.x, trace.y, strict=True)
    ]
    assert len(points) == len(advice.candidates) and all("text" in t.mode for t in tried)
    labelled = [(text, x, y) for text, hover, x, y in points if text]
    setting = {
        f"b{c.max_batch_size} · {c.timeout_ms:g} ms": f"max batch {c.max_batch_size}, timeout "
        f"{c.timeout_ms:g} ms"
        for c in advice.candidates
    }
    assert all(hover.startswith(setting[text]) for text, hover, *_ in points if text)
    pick = f"b{advice.settings.max_batch_size} · {advice.settings.timeout_ms:g} ms"
    assert pick in [text for text, *_ in labelled]
    assert 3 <= len(labelled) < len(points)  # at a fixed rate many settings share a spot
    assert len({(round(x, 6), round(y, 3)) for _, x, y in labelled}) == len(labelled)
    assert_plain_log_axis(figure.layout.xaxis)


def assert_plain_log_axis(axis) -> None:  # type: ignore[no-untyped-def]
    """Tick labels that are the tick values written out, ascending ('2, 5, 10, 20', never
    Plotly's mantissa digits '3, 5, 8, 1, 2')."""
    assert axis.type == "log" and len(axis.tickvals) >= 3
    assert [float(text) for text in axis.ticktext] == list(axis.tickvals)
    assert list(axis.tickvals) == sorted(axis.tickvals)


def test_the_rate_sweep_has_a_readable_latency_axis() -> None:
    frame = whatif.rate_sweep(PROFILE, BatchingSettings(max_batch_size=8, timeout_ms=2))

    figure = figures.sweep_figure(frame, 300)

    assert_plain_log_axis(figure.layout.yaxis2)  # latency, on the right
    low, high = frame[["p50_ms", "p99_ms"]].min().min(), frame["p99_ms"].max()
    ticks = figure.layout.yaxis2.tickvals
    assert sum(low <= t <= high for t in ticks) >= 3  # ticks where the lines are


def test_the_profile_puts_batch_sizes_on_a_category_axis() -> None:
    axis = figures.profile_figure(PROFILE).layout.xaxis

    assert axis.type == "category" and list(axis.categoryarray) == ["1", "2", "4", "8"]
    assert axis.title.text == "batch size" and axis.automargin
