"""Who may use the studio.

No login is asked unless one is configured. With `[auth]` in `.streamlit/secrets.toml`, people sign
in through OpenID Connect (Streamlit's `st.login`, which needs Authlib); otherwise, with
`OPTISTUDIO_STUDIO_PASSWORD` set, they type the admin's password (`login_config` reads which).
Share links belong to the account's subject at its provider (`share_owner`). Only a flag is kept in
`st.session_state`, never the password, and neither the password nor what was typed is logged or
shown. Share links (`?share=TOKEN`) are answered before this gate and stay public.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib.util
import json
import logging
import time
import urllib.request
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

import streamlit as st
from pydantic import SecretStr

from optistudio.studio.login_config import oidc_configured
from optistudio.studio.state import settings

log = logging.getLogger(__name__)

SIGNED_IN = "optistudio_signed_in"
WRONG_PASSWORD_DELAY_S = 1.0
"""A wrong password waits this long before the answer, to slow guessing down."""

PROVIDER_TIMEOUT_S = 3
OWNER_LENGTH = 255
"""The shares table's owner column holds this many characters."""

LoginMode = Literal["none", "password", "oidc"]


def login_mode(password: SecretStr, *, oidc_configured: bool) -> LoginMode:
    """OpenID Connect when secrets.toml has [auth], else a password when one is set, else none."""
    if oidc_configured:
        return "oidc"
    return "password" if password.get_secret_value() else "none"


def password_matches(given: str, expected: SecretStr) -> bool:
    """Constant-time comparison, so the time taken says nothing about the password."""
    return hmac.compare_digest(given.encode(), expected.get_secret_value().encode())


def require_login() -> None:
    """Stop the script run at a login form unless this session has signed in (or none is set)."""
    password = settings().studio_password
    mode = login_mode(password, oidc_configured=oidc_configured())
    if mode == "oidc":
        _oidc_gate()
    elif mode == "password":
        _password_gate(password)


def _oidc_gate() -> None:
    if importlib.util.find_spec("authlib") is None:  # fail closed, with what to do
        st.error(
            "Sign-in through OpenID Connect is configured ([auth] in .streamlit/secrets.toml) but "
            "Authlib is not installed. Install it with pip install 'optistudio[auth]' and restart."
        )
        st.stop()
    if st.user.is_logged_in:
        st.sidebar.caption(f"Signed in as {signed_in_as(st.user.to_dict())}")
        st.sidebar.button("Log out", on_click=st.logout)
        return
    st.title("Optistudio")
    st.write("Sign in with your organisation's account to use the studio.")
    metadata_url = str(st.secrets["auth"].get("server_metadata_url") or "")
    problem = provider_problem(metadata_url) if metadata_url else None
    if problem:
        st.warning(
            f"The sign-in provider at {urlsplit(metadata_url).netloc} does not answer ({problem}), "
            "so signing in will fail until it is back. Ask the administrator to check it."
        )
    st.button("Log in", type="primary", on_click=st.login)
    st.stop()


def provider_problem(metadata_url: str) -> str | None:
    """Why the provider's discovery document cannot be read, or None when it can.

    Checked each time the login screen shows (not cached, so it is never stale), because
    Streamlit's own answer to a provider that is down is a bare "Authentication error" page."""
    try:
        with urllib.request.urlopen(metadata_url, timeout=PROVIDER_TIMEOUT_S) as response:
            json.load(response)
    except (OSError, ValueError) as exc:
        log.warning("OIDC provider discovery failed: %s", exc)
        return str(getattr(exc, "reason", None) or exc)
    return None


def signed_in_as(claims: Mapping[str, object]) -> str:
    """Who signed in, as 'Name (email)', from the ID token claims; whichever of them came."""
    name, email = str(claims.get("name") or ""), str(claims.get("email") or "")
    if name and email:
        return f"{name} ({email})"
    return name or email or str(claims.get("sub") or "an unnamed account")


def share_owner(claims: Mapping[str, object]) -> str:
    """The key a signed-in account's share links are kept under, from its ID token's claims.

    The identity provider's subject (`sub`, unique and never reassigned within its issuer
    `iss`), never a display name or e-mail, which two accounts can share or which can change
    hands. Only a token without `sub` (not OpenID Connect as written) falls back to its e-mail,
    the key used before; with neither, "" (nobody: links it makes are listed for no one).
    Links made before this keying were kept under a name or an e-mail: they still open, and
    no account lists or revokes them (docs/SECURITY.md)."""
    subject = str(claims.get("sub") or "")
    if not subject:
        return str(claims.get("email") or "")
    key = f"oidc {claims.get('iss') or '-'} {subject}"  # an issuer URL holds no space
    if len(key) <= OWNER_LENGTH:
        return key
    return f"oidc sha256 {hashlib.sha256(key.encode()).hexdigest()}"


def _password_gate(expected: SecretStr) -> None:
    if st.session_state.get(SIGNED_IN):
        st.sidebar.button("Sign out", on_click=_sign_out)
        return
    st.title("Optistudio")
    with st.form("login"):
        given = st.text_input("Password", type="password", help="Set by the administrator.")
        submitted = st.form_submit_button("Sign in", type="primary")
    if submitted:
        if password_matches(given, expected):
            st.session_state[SIGNED_IN] = True
            st.rerun()
        log.warning("studio sign-in refused: wrong password")
        time.sleep(WRONG_PASSWORD_DELAY_S)
        st.error("Wrong password. Ask the administrator if you do not know it.")
    st.stop()


def _sign_out() -> None:
    st.session_state.pop(SIGNED_IN, None)
