"""Compare page logic: URL round trip, snapshots from stored results, share links; the page itself
through Streamlit's AppTest against a real migrated SQLite database."""

from __future__ import annotations

from typing import Any

import pytest
from compare_seed import ENV, Seeded, benchmark, seed
from streamlit.testing.v1 import AppTest

from optistudio.core.report.snapshot import environment_differences
from optistudio.studio.compare_services import (
    Selection,
    build_snapshot,
    read_selection,
    result_options,
    revoke,
    share_snapshot,
    shared_snapshot,
    write_selection,
)


@pytest.fixture
def seeded(db_factory, app_settings, make_model) -> Seeded:
    return seed(
        db_factory, app_settings, make_model("tiny.onnx"), make_model("v.onnx", features=12)
    )


def test_selection_round_trips_through_the_url() -> None:
    chosen = Selection(keys=["3.onnxruntime.1.2", "4.openvino.8.0"], baseline="4.openvino.8.0")
    chosen.budget_ms = 2.5
    params: dict[str, str] = {"other": "kept"}
    write_selection(params, chosen)
    assert params == {
        "other": "kept",
        "results": "3.onnxruntime.1.2,4.openvino.8.0",
        "baseline": "4.openvino.8.0",
        "budget": "2.5",
    }
    assert read_selection(params) == chosen
    write_selection(params, Selection())
    assert params == {"other": "kept"}


def test_bad_urls_give_problems_not_errors() -> None:
    got = read_selection(
        {
            "results": "1.onnxruntime.1.2,<script>,1.onnxruntime.1.2,",
            "baseline": "9.x.1.1",
            "budget": "fast",
        }
    )
    assert got.keys == ["1.onnxruntime.1.2"]
    assert got.baseline is None
    assert got.budget_ms is None
    assert len(got.problems) == 2 and "'<script>'" in got.problems[0]


def test_snapshot_of_stored_results(db_factory, seeded: Seeded) -> None:
    options = result_options(db_factory)
    assert list(options) == seeded.keys[::-1]  # newest first
    wanted = Selection(keys=[*seeded.keys, "999.onnxruntime.1.2"], baseline=seeded.keys[0])
    snapshot, missing = build_snapshot(db_factory, wanted)
    assert missing == ["999.onnxruntime.1.2"]
    assert [r.key for r in snapshot.rows] == seeded.keys
    original, variant, big = snapshot.rows
    assert original.metrics["cosine_error"] == 0.0  # the reference itself
    assert variant.metrics["cosine_error"] == pytest.approx(0.01)
    assert variant.parent_id == seeded.original and variant.precision == "int8"
    assert "[int8]" in variant.label and "[int8]" in options[seeded.keys[1]]
    assert "[" not in original.label  # fp32 goes without saying
    assert "accuracy from optimize job" in variant.accuracy_note
    assert snapshot.frontier() == [0, 1]  # the b8 run is slower and no more exact
    assert any("Test CPU" in d and "Other CPU" in d for d in environment_differences(snapshot))


def test_share_is_frozen_and_revocable(db_factory, seeded: Seeded) -> None:
    snapshot, _ = build_snapshot(db_factory, Selection(keys=seeded.keys[:2]))
    token = share_snapshot(db_factory, snapshot, owner="local")
    benchmark(db_factory, seeded.original, 1, 0.1, ENV)  # a newer, faster result arrives
    assert shared_snapshot(db_factory, token) == snapshot
    assert not revoke(db_factory, token=token, owner="mallory")
    assert revoke(db_factory, token=token, owner="local")
    assert shared_snapshot(db_factory, token) is None
    assert shared_snapshot(db_factory, "not a token") is None


@pytest.fixture
def fresh_state(app_settings) -> None:
    from optistudio.studio import state

    state.settings.clear()
    state.session_factory.clear()


def compare_page() -> None:
    from optistudio.studio.views.compare import render

    render()


def test_page_renders_the_url_selection_and_shares_it(db_factory, seeded, fresh_state) -> None:
    at = AppTest.from_function(compare_page, default_timeout=60)
    at.query_params["results"] = ",".join([*seeded.keys, "77.onnxruntime.1.1"])
    at.query_params["budget"] = "1.5"
    at.run()
    assert not at.exception
    assert any("not stored" in w.value for w in at.warning)
    assert any("Environments differ" in w.value for w in at.warning)
    assert any("Sweet spot within 1.5 ms" in s.value for s in at.success)
    assert at.multiselect[0].value == seeded.keys
    assert at.query_params["results"] == ",".join(seeded.keys)  # the unknown one dropped
    assert len(at.get("plotly_chart")) == 3
    at.multiselect[0].set_value(seeded.keys[:2]).run()  # the widget writes the URL back
    assert at.query_params["results"] == ",".join(seeded.keys[:2])
    assert at.query_params["budget"] == "1.5"
    next(b for b in at.button if b.label == "Share").click().run()
    token = _token(at)
    shared = AppTest.from_file("../../studio/app.py", default_timeout=60)
    shared.query_params["share"] = token
    shared.run()
    assert not shared.exception
    assert shared.title[0].value.startswith("2 results")
    assert len(shared.get("plotly_chart")) == 3
    assert not shared.get("multiselect") and not shared.button  # read-only: nothing to submit


def _token(at: Any) -> str:
    code = at.get("code")[0].value
    return code.rsplit("share=", 1)[1].strip()


@pytest.mark.parametrize("token", ["", "garbage", "A" * 43, "x' OR 1=1 --"])
def test_unknown_or_malformed_share_is_a_plain_not_found(db_factory, fresh_state, token) -> None:
    at = AppTest.from_file("../../studio/app.py", default_timeout=60)
    at.query_params["share"] = token
    at.run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Not found"]
    assert not at.error


def test_empty_history_and_empty_selection_have_useful_messages(db_factory, fresh_state) -> None:
    at = AppTest.from_function(compare_page, default_timeout=60)
    at.run()
    assert not at.exception
    assert any("No stored results yet" in i.value for i in at.info)
