"""Driving the studio's Streamlit widgets and reading what they hold, for the browser tests."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from browser import UI_TIMEOUT_MS, idle

CLICKS = 2
"""A download button clicked, or a pick made, once more when the first brings nothing."""
FIRST_CLICK_MS = 30_000


PICK_SHOWN_MS = 5_000
"""How long a pick's tag may take to show before the pick is made once more."""


def pick(page: Any, text: str, *, widget: int = 0) -> None:
    """Choose the option whose label holds `text` in the page's `widget`-th multiselect: typed
    into it (the list is filtered to the options holding it), then clicked.

    The page is let settle first, and the pick is made once more, as a user would, when its tag
    does not show: a pick made while the page reruns from the one before can land on the option
    list the rerun replaces (a CI run's third pick of three was lost so, the link holding two)."""
    from playwright.sync_api import expect

    box = page.get_by_test_id("stMultiSelect").nth(widget)
    tags = box.get_by_test_id("stMultiSelectTagsContainer")
    for attempt in range(CLICKS):
        idle(page)
        if attempt and text in tags.inner_text():
            return  # the first pick took, later than its tag was looked for
        box.locator("input").click()
        page.keyboard.type(text)
        page.get_by_role("option", name=re.compile(re.escape(text))).first.click()
        page.keyboard.press("Escape")
        try:
            expect(tags).to_contain_text(text, timeout=PICK_SHOWN_MS)
            return
        except AssertionError:
            if attempt == CLICKS - 1:
                raise


def share_link(page: Any) -> str:
    """Press the Compare page's Share button; the link it shows."""
    page.get_by_role("button", name="Share", exact=True).click()
    code = page.locator("code").filter(has_text="share=")
    code.wait_for(timeout=UI_TIMEOUT_MS)
    return str(code.inner_text()).strip()


def download(page: Any, button: str | re.Pattern[str], folder: Path) -> Path:
    """Click a download button once the page has settled; the saved file.

    A report is built when its button is clicked (Streamlit's deferred download), from the
    generator the page's last run registered. A click that lands while a run replaces that
    generator asks for one Streamlit has dropped and brings nothing (a CI run waited 60 s for
    it), so the page is let settle first and the button clicked once more, as a user would,
    when the first click brings nothing."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(CLICKS):
        idle(page)
        timeout = FIRST_CLICK_MS if attempt < CLICKS - 1 else UI_TIMEOUT_MS
        try:
            with page.expect_download(timeout=timeout) as event:
                page.get_by_role("button", name=button).click()
            break
        except PlaywrightTimeout:
            if attempt == CLICKS - 1:
                raise
    path = folder / event.value.suggested_filename
    event.value.save_as(path)
    return path
