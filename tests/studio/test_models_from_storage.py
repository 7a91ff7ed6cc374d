"""The Models page's "Add from shared storage" (issue 42, item 5): shown only when the operator
set model roots; it lists the models under them and adds a picked one (a decoder over the
upload limit here). Paths outside the roots: tests/services/test_model_roots.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from large_decoder import large_decoder

from optistudio.db.queries import list_models
from optistudio.db.session import transaction
from optistudio.studio.model_storage_services import storage_offer
from tests.studio.conftest import clear_studio, view_page


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, app_settings: Any) -> Path:
    from optistudio.services.settings import get_settings

    folder = tmp_path / "shared"
    large_decoder(folder / "team" / "big-decoder")
    monkeypatch.setenv("OPTISTUDIO_MODEL_ROOTS", str(folder))
    monkeypatch.setenv("OPTISTUDIO_MAX_UPLOAD_MB", "1")
    get_settings.cache_clear()
    clear_studio()
    return folder


def _names(factory: Any) -> list[str]:
    with transaction(factory) as s:
        return [model.name for model in list_models(s)]


def test_the_offer_is_off_without_roots(app_settings: Any) -> None:
    assert storage_offer(app_settings) is None


def test_a_listed_decoder_over_the_upload_limit_is_added(root: Path, db_factory: Any) -> None:
    at = view_page("optistudio.studio.views.models", timeout=120)
    at.run()
    assert not at.exception, at.exception
    picker = next(box for box in at.selectbox if box.key == "storage-path")
    assert picker.options == [str(root / "team" / "big-decoder")]

    picker.set_value(str(root / "team" / "big-decoder")).run()
    next(b for b in at.button if b.label == "Add from storage").click().run()

    assert not at.exception, at.exception
    assert _names(db_factory) == ["big-decoder"]
    assert not at.error
