"""Whether the studio asks who is there, read without running a page.

The studio's gate (`auth.require_login`) and `optistudio up`'s refusal to serve an open studio
beyond this machine ask the same two questions: is OpenID Connect configured (`[auth]` in the
secrets Streamlit reads: `.streamlit/secrets.toml` in the working folder or the home folder,
or the files `secrets.files` names), and is a password set.
"""

from __future__ import annotations

import streamlit as st

from optistudio.services.settings import Settings


def oidc_configured() -> bool:
    """True when Streamlit's secrets hold an `[auth]` table (sign-in through OpenID Connect)."""
    return bool(st.secrets.load_if_toml_exists() and "auth" in st.secrets)


def login_configured(settings: Settings) -> bool:
    """True when the studio will ask for a password or an OpenID Connect sign-in."""
    return bool(settings.studio_password.get_secret_value()) or oidc_configured()
