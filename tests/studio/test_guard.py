from __future__ import annotations

import pytest

from optistudio.studio.guard import guarded


def test_a_bug_shows_a_notice_and_is_logged(monkeypatch, caplog) -> None:
    shown = []
    monkeypatch.setattr("optistudio.studio.guard.st.error", shown.append)

    def broken_page() -> None:
        raise KeyError("model_id")

    guarded(broken_page)()

    assert shown and "Internal error on this page" in shown[0]
    assert "Traceback" not in shown[0]
    assert "KeyError" in caplog.text


def test_streamlit_control_flow_passes_through() -> None:
    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    def stopping_page() -> None:
        raise StopException()

    with pytest.raises(StopException):
        guarded(stopping_page)()
