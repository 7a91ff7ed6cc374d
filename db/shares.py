"""Share links: a frozen snapshot behind an unguessable token, revocable by its owner.

Like `optistudio.db.queries`, none of these commits: the caller's ``transaction(...)`` does.
"""

from __future__ import annotations

import copy
import re
import secrets
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from optistudio.db.models import Share

TOKEN_BYTES = 32
"""256 random bits from `secrets`; the token is their URL-safe base64 (43 characters)."""
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_-]{43}")


def new_token() -> str:
    return secrets.token_urlsafe(TOKEN_BYTES)


def is_well_formed(token: str) -> bool:
    """Whether `token` could be one of ours (checked before any query)."""
    return bool(TOKEN_PATTERN.fullmatch(token))


def create_share(s: Session, *, owner: str, snapshot: dict[str, Any], title: str = "") -> Share:
    """A new share holding a deep copy of `snapshot`, flushed so its token and id are set."""
    share = Share(
        token=new_token(), owner=owner, title=title[:255], snapshot=copy.deepcopy(snapshot)
    )
    s.add(share)
    s.flush()
    return share


def open_share(s: Session, *, token: str) -> Share | None:
    """The live share with this token; None when malformed, unknown or revoked (alike)."""
    if not is_well_formed(token):
        return None
    share = s.scalars(select(Share).where(Share.token == token)).one_or_none()
    if share is None or share.revoked_at is not None:
        return None
    return share


def list_shares(s: Session, *, owner: str) -> list[Share]:
    """The owner's shares, newest first, revoked ones included."""
    query = select(Share).where(Share.owner == owner).order_by(Share.id.desc())
    return list(s.scalars(query))


def revoke_share(s: Session, *, token: str, owner: str) -> bool:
    """Revoke the owner's share; False when it is not theirs, unknown or already revoked."""
    if not is_well_formed(token):
        return False
    share = s.scalars(select(Share).where(Share.token == token, Share.owner == owner)).one_or_none()
    if share is None or share.revoked_at is not None:
        return False
    share.revoked_at = datetime.now(UTC)
    s.flush()
    return True
