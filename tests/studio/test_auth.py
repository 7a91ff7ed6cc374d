from __future__ import annotations

from pydantic import SecretStr

from optistudio.services.settings import Settings
from optistudio.studio.auth import login_mode, password_matches


def test_login_mode_prefers_oidc_then_password_then_none() -> None:
    assert login_mode(SecretStr(""), oidc_configured=False) == "none"
    assert login_mode(SecretStr("pw"), oidc_configured=False) == "password"
    assert login_mode(SecretStr("pw"), oidc_configured=True) == "oidc"
    assert login_mode(SecretStr(""), oidc_configured=True) == "oidc"


def test_password_comparison() -> None:
    expected = SecretStr("s3cret-é")
    assert password_matches("s3cret-é", expected)
    assert not password_matches("s3cret-e", expected)
    assert not password_matches("", expected)
    assert not password_matches("s3cret-é ", expected)


def test_the_password_never_appears_in_settings_output(monkeypatch) -> None:
    monkeypatch.setenv("OPTISTUDIO_STUDIO_PASSWORD", "hunter2-Xy")
    settings = Settings()
    assert "hunter2-Xy" not in repr(settings) and "hunter2-Xy" not in str(settings.model_dump())
    assert settings.studio_password.get_secret_value() == "hunter2-Xy"
