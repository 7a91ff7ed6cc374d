"""The model card's task: recognition's reading beside the picker that sets it for every job."""

from __future__ import annotations


def task_card(model_id: int) -> None:
    from optistudio.db.queries import get_model
    from optistudio.db.session import transaction
    from optistudio.studio import state
    from optistudio.studio.model_task import task_section

    with transaction(state.session_factory()) as s:
        model = get_model(s, model_id=model_id)
        chosen = {"id": model.id, "sha256": model.sha256, "path": model.path}
    task_section(chosen)


def test_the_card_shows_the_reading_and_saves_the_task_for_every_job(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tiny_model
) -> None:
    from optistudio.services.catalog import add_model_file
    from optistudio.services.model_tasks import load_task
    from tests.studio.conftest import studio_page

    model_id = add_model_file(db_factory, app_settings, tiny_model, name="m").model_id

    at = studio_page(task_card, model_id=model_id)
    at.run()
    picker = next(box for box in at.selectbox if box.label == "Judge this model as")
    caption = " ".join(c.value for c in at.caption)
    assert not at.exception and picker.value == ""
    assert "Recognized: " in caption and "unless one is set here" in caption
    picker.set_value("classification")
    next(b for b in at.button if b.label == "Save task").click().run()

    assert not at.exception and load_task(db_factory, model_id) == "classification"
    caption = " ".join(c.value for c in at.caption)
    assert "Set on the card: **Classification" in caption
