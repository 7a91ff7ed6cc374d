"""Driving the studio's Streamlit widgets and reading what they hold, for the browser tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from browser import UI_TIMEOUT_MS


def pick(page: Any, text: str, *, widget: int = 0) -> None:
    """Choose the option whose label holds `text` in the page's `widget`-th multiselect: typed
    into it (the list is filtered to the options holding it), then clicked."""
    page.locator("[data-testid='stMultiSelect'] input").nth(widget).click()
    page.keyboard.type(text)
    page.get_by_role("option", name=re.compile(re.escape(text))).first.click()
    page.keyboard.press("Escape")


def share_link(page: Any) -> str:
    """Press the Compare page's Share button; the link it shows."""
    page.get_by_role("button", name="Share", exact=True).click()
    code = page.locator("code").filter(has_text="share=")
    code.wait_for(timeout=UI_TIMEOUT_MS)
    return str(code.inner_text()).strip()


def download(page: Any, button: str, folder: Path) -> Path:
    """Click a download button; the saved file."""
    with page.expect_download() as event:
        page.get_by_role("button", name=button).click()
    path = folder / event.value.suggested_filename
    event.value.save_as(path)
    return path
