"""The Batching page offers what the batching jobs can do: a GRU state declared at batch 1 on
its batch axis (AECMOS's h0 [4, 1, 64]) is batched through the jobs' checked rewrite, so the
page shows the profile form and says so, where it used to refuse the model for "a fixed first
dimension"; a state whose axis the graph hides is still refused in one sentence
(tests/recurrent_state_models.py, core/batching/freeing.py)."""

from __future__ import annotations

from pathlib import Path

from recurrent_state_models import build_state_model

from optistudio.services.catalog import add_model_file
from tests.studio.conftest import view_page


def _page(model_id: int):  # type: ignore[no-untyped-def]
    at = view_page("optistudio.studio.views.batching", query={"model": str(model_id)}).run()
    assert not at.exception, at.exception
    return at


def test_the_page_offers_a_state_batched_model(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    path = build_state_model(tmp_path / "state.onnx")
    model_id = add_model_file(db_factory, app_settings, path, name="state").model_id

    at = _page(model_id)

    assert not [w.value for w in at.warning if "does not apply" in w.value]
    (note,) = [i.value for i in at.info if "recurrent state" in i.value]
    assert "('h0' on axis 1)" in note
    assert [n for n in at.number_input if n.label == "Largest batch"]  # the profile form


def test_the_page_refuses_a_state_whose_batch_axis_the_graph_hides(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path: Path
) -> None:
    path = build_state_model(tmp_path / "hidden.onnx", slice_axis=1)
    model_id = add_model_file(db_factory, app_settings, path, name="hidden").model_id

    at = _page(model_id)

    (warning,) = [w.value for w in at.warning if "does not apply" in w.value]
    assert "'h0' has a fixed first dimension of 2" in warning
    assert not [n for n in at.number_input if n.label == "Largest batch"]
