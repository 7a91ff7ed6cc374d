"""The studio behind a password, in real headless Chromium against a real `optistudio up`.

Sign-in through OpenID Connect is tested against a real provider in test_login_oidc_browser.py."""

from __future__ import annotations

import pytest
from browser import UI_TIMEOUT_MS, Studio, shot

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PASSWORD = "correct-Horse-7191-battery"
WITH_PASSWORD = {"OPTISTUDIO_STUDIO_PASSWORD": PASSWORD}


@pytest.mark.parametrize("studio", [WITH_PASSWORD], indirect=True)
def test_wrong_password_is_refused_and_the_right_one_lets_you_in(studio: Studio, page) -> None:
    from playwright.sync_api import expect

    page.goto(f"{studio.url}/jobs")  # a deep link is gated as well
    password = page.get_by_label("Password", exact=True)
    expect(password).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_role("heading", name="Jobs")).to_have_count(0)
    expect(page.get_by_role("link", name="Models")).to_have_count(0)  # no navigation either

    password.fill("not-the-password")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_text("Wrong password.")).to_be_visible()
    expect(page.get_by_role("heading", name="Jobs")).to_have_count(0)
    shot(page, "login")

    page.get_by_label("Password", exact=True).fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Models")).to_be_visible()  # the default page
    page.get_by_role("link", name="Jobs").click()
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()  # the session stays in
    assert PASSWORD not in page.content()

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_label("Password", exact=True)).to_be_visible()

    page.goto(f"{studio.url}/?share=no-such-token")  # share links stay public, and show only it
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    expect(page.get_by_label("Password", exact=True)).to_have_count(0)
    expect(page.get_by_role("link", name="Models")).to_have_count(0)

    assert PASSWORD not in studio.log_path.read_text(errors="replace")
    data = studio.log_path.parent / "data"
    logs = [p for p in data.rglob("*.log") if p.is_file()]
    assert all(PASSWORD not in p.read_text(errors="replace") for p in logs)
