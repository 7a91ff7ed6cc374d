"""The Optimize page's form on a stored decoder, through Streamlit's AppTest against a real
migrated SQLite database: it suggests the perplexity budget the decoder's run uses, says what the
run reads, and leaves the settings it does not read (labels, the cosine floor, the judged
output) disabled; an ordinary model keeps them."""

from __future__ import annotations

from pathlib import Path

from decoder_models import build_tiny_decoder

from optistudio.services.catalog import add_model_file
from optistudio.studio.views.optimize import DECODER_FORM
from tests.studio.conftest import studio_page

IGNORED = ("Least mean cosine", "Output the budget judges (empty = the first output)")


def _optimize_page() -> None:
    from optistudio.studio import cached
    from optistudio.studio.model_picker import pick_model
    from optistudio.studio.views.optimize import optimize_form

    optimize_form(pick_model(cached.model_choices()))


def _page(model_id: int):  # type: ignore[no-untyped-def]
    return studio_page(_optimize_page, query={"model": str(model_id)}).run()


def _widgets(at):  # type: ignore[no-untyped-def]
    return {w.label: w for w in [*at.number_input, *at.text_input]}


def test_a_decoders_form_offers_what_its_run_reads(
    db_factory, app_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    model = build_tiny_decoder(tmp_path / "decoder")
    model_id = add_model_file(db_factory, app_settings, model, name="decoder").model_id

    at = _page(model_id)

    assert not at.exception, at.exception
    assert DECODER_FORM in [c.value for c in at.caption]
    widgets = _widgets(at)
    [budget] = [w for label, w in widgets.items() if label.startswith("Budget")]
    assert "perplexity_increase=0.05" in budget.label and "top1" not in budget.label
    assert all(widgets[label].proto.disabled for label in IGNORED)
    assert not widgets["Timing seconds per variant"].proto.disabled


def test_an_ordinary_models_form_keeps_its_settings(
    db_factory, app_settings, tiny_model: Path
) -> None:  # type: ignore[no-untyped-def]
    model_id = add_model_file(db_factory, app_settings, tiny_model, name="tiny").model_id

    at = _page(model_id)

    assert not at.exception, at.exception
    assert DECODER_FORM not in [c.value for c in at.caption]
    assert not any(_widgets(at)[label].proto.disabled for label in IGNORED)
