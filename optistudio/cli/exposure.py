"""`optistudio up` on an address beyond this machine: refused when nobody is asked who they are.

A studio with no password and no OpenID Connect lets whoever reaches its port upload models,
run jobs and read every result. On a loopback address (127.0.0.0/8, ::1, localhost) that is
this machine's users; on any other `--host` it is the network's, so `up` (and `ui`, which
reads OPTISTUDIO_HOST) refuses to start unless `--allow-open` (OPTISTUDIO_ALLOW_OPEN) says the
network is trusted, and then warns.
Streamlit is imported only to read the secrets when no password is set.
"""

from __future__ import annotations

import ipaddress
import logging

from optistudio.cli.stack_settings import env_name
from optistudio.core.errors import InvalidSpec
from optistudio.services.settings import Settings

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches: 127.0.0.0/8, ::1 (also IPv4-mapped),
    `localhost`. An empty host is every interface."""
    name = host.strip().strip("[]").lower().rstrip(".")
    if name == "localhost":
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:  # a host name: it may resolve to anything
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or bool(mapped and mapped.is_loopback)


def check_exposure(settings: Settings) -> None:
    """Raise InvalidSpec when the studio would listen beyond this machine with no login, unless
    `allow_open`; with it, log a warning."""
    if is_loopback(settings.host) or settings.studio_password.get_secret_value():
        return
    from optistudio.studio.login_config import oidc_configured  # imports Streamlit: only here

    if oidc_configured():
        return
    if settings.allow_open:
        log.warning(
            "the studio on %s asks no password: anyone who reaches it uses it", _shown(settings)
        )
        return
    raise InvalidSpec(
        f"Refusing to serve the studio on {_shown(settings)} with no password and no OpenID "
        "Connect: anyone who can reach that address could upload models and run jobs.",
        hint=f"Set {env_name('studio_password')}, or [auth] in .streamlit/secrets.toml "
        "(docs/DEPLOYMENT.md); keep --host 127.0.0.1 for this machine alone; or, on a network "
        f"you trust, pass --allow-open ({env_name('allow_open')}=1).",
    )


def _shown(settings: Settings) -> str:
    return settings.host or "every interface"
