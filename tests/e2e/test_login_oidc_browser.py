"""Sign-in through OpenID Connect for real: Streamlit's `st.login` (Authlib) against a real
provider process (`oidc-provider-mock`, tests/e2e/oidc_provider.py), in headless Chromium
against a real `optistudio up`."""

from __future__ import annotations

import importlib.util
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import UI_TIMEOUT_MS, Studio, shot
from oidc_provider import Person, Provider, running_provider, secrets_toml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ADA = Person(sub="ada", name="Ada Lovelace", email="ada@example.org")
PASSWORD = "also-set-but-OIDC-wins-4471"


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[Provider]:
    for module in ("oidc_provider_mock", "authlib"):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is missing: pip install -e '.[dev]'")
    with running_provider(tmp_path / "provider.log", [ADA]) as running:
        yield running


@pytest.fixture
def auth_secrets(
    provider: Provider, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """Fresh secrets in a secrets.toml the studio reads (STREAMLIT_SECRETS_FILES)."""
    values = {
        "client_secret": f"client-{secrets.token_urlsafe(24)}",
        "cookie_secret": f"cookie-{secrets.token_urlsafe(24)}",
    }
    path = tmp_path / "secrets.toml"
    path.write_text(secrets_toml(provider, **values))
    monkeypatch.setenv("STREAMLIT_SECRETS_FILES", str(path))
    monkeypatch.setenv("OPTISTUDIO_STUDIO_PASSWORD", PASSWORD)
    return values


@pytest.fixture
def studio(auth_secrets: dict[str, str], studio: Studio) -> Studio:
    """The conftest's `optistudio up`, started once the secrets are in the environment."""
    return studio


def shared_token(studio: Studio) -> str:
    """A real share link, stored in the studio's own database."""
    from optistudio.core.report.snapshot import CompareSnapshot
    from optistudio.db.session import make_session_factory
    from optistudio.studio.compare_services import share_snapshot

    database = studio.log_path.parent / "data" / "optistudio.db"
    factory = make_session_factory(f"sqlite:///{database}")
    snapshot = CompareSnapshot(title="Shared before any login", rows=[])
    return share_snapshot(factory, snapshot, owner="ada@example.org")


def test_sign_in_through_the_provider_then_out_while_share_links_stay_public(
    studio: Studio, page, provider: Provider, auth_secrets: dict[str, str]
) -> None:
    from playwright.sync_api import expect

    page.goto(f"{studio.url}/jobs")  # a deep link is gated as well
    expect(page.get_by_role("button", name="Log in")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_role("heading", name="Jobs")).to_have_count(0)
    expect(page.get_by_role("link", name="Models")).to_have_count(0)  # no navigation either
    expect(page.get_by_label("Password", exact=True)).to_have_count(0)  # OIDC replaces it
    shot(page, "oidc-login")

    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Authorize Client")).to_be_visible()
    assert page.url.startswith(provider.url), page.url  # the provider's own page
    page.get_by_role("button", name="Deny").click()  # the provider says no: still closed
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    expect(page.get_by_role("link", name="Models")).to_have_count(0)

    page.get_by_role("button", name="Log in").click()
    page.get_by_role("button", name=ADA.sub, exact=True).click()

    expect(page.get_by_role("heading", name="Models")).to_be_visible()  # back in the studio
    expect(page.get_by_text(f"Signed in as {ADA.name} ({ADA.email})")).to_be_visible()
    page.get_by_role("link", name="Jobs").click()
    expect(page.get_by_role("heading", name="Jobs")).to_be_visible()  # the session stays in
    content = page.content()
    assert all(secret not in content for secret in auth_secrets.values())
    shot(page, "oidc-signed-in")

    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("heading", name="End Session")).to_be_visible()  # the provider's
    page.get_by_role("button", name="End session").click()
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    page.goto(f"{studio.url}/jobs")
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    expect(page.get_by_role("heading", name="Jobs")).to_have_count(0)

    page.goto(f"{studio.url}/?share={shared_token(studio)}")  # public, and only the snapshot
    expect(page.get_by_role("heading", name="Shared before any login")).to_be_visible()
    expect(page.get_by_role("button", name="Log in")).to_have_count(0)
    expect(page.get_by_role("link", name="Models")).to_have_count(0)

    provider.stop()  # the provider goes away: the login screen says so instead of failing later
    page.goto(studio.url)
    expect(page.get_by_text("The sign-in provider at 127.0.0.1:")).to_be_visible()
    expect(page.get_by_text("does not answer")).to_be_visible()
    expect(page.get_by_role("link", name="Models")).to_have_count(0)

    logs = [studio.log_path, *(studio.log_path.parent / "data").rglob("*.log")]
    texts = [p.read_text(errors="replace") for p in logs if p.is_file()]
    assert any("celery@" in t or "ready" in t for t in texts), "the logs hold the stack's output"
    for secret in auth_secrets.values():
        assert all(secret not in text for text in texts)
