"""Share links under OpenID Connect belong to the provider's subject, not a name or an e-mail
(issue 39, case 12): two accounts with one display name and e-mail never see or revoke each
other's links, and links made under the old name keys still open but are listed for no one."""

from __future__ import annotations

from typing import Any

import pytest

from optistudio.db.session import transaction
from optistudio.db.shares import create_share, list_shares, open_share, revoke_share
from optistudio.studio.auth import OWNER_LENGTH, share_owner

ISSUER = "https://login.example.com/realms/lab"
ANA = {"iss": ISSUER, "sub": "f81d4fae-7dec", "name": "Ana Silva", "email": "ana@example.com"}
OTHER_ANA = {**ANA, "sub": "9a1c0b33-5e21"}  # a second account, same name and e-mail
SNAPSHOT: dict[str, Any] = {"title": "t", "rows": []}


def test_two_accounts_with_one_name_and_email_are_two_owners() -> None:
    assert share_owner(ANA) != share_owner(OTHER_ANA)
    assert "Ana" not in share_owner(ANA) and "ana@" not in share_owner(ANA)


def test_one_subject_at_two_issuers_is_two_owners() -> None:
    elsewhere = {**ANA, "iss": "https://accounts.other.example"}

    assert share_owner(ANA) != share_owner(elsewhere)


def test_the_key_stays_with_the_subject_when_the_name_or_email_changes() -> None:
    renamed = {**ANA, "name": "Ana S.", "email": "ana.silva@example.com"}

    assert share_owner(renamed) == share_owner(ANA)


def test_a_long_subject_fits_the_owner_column_and_stays_distinct() -> None:
    long_one, long_two = ({**ANA, "sub": c * 300} for c in "ab")

    assert len(share_owner(long_one)) <= OWNER_LENGTH
    assert share_owner(long_one) == share_owner(dict(long_one))
    assert share_owner(long_one) != share_owner(long_two)


@pytest.mark.parametrize(
    ("claims", "owner"),
    [
        ({"email": "ana@example.com", "name": "Ana"}, "ana@example.com"),
        ({"name": "Ana"}, ""),
        ({}, ""),
    ],
    ids=["no-sub-email-fallback", "name-only-is-nobody", "nothing"],
)
def test_without_a_subject_only_the_email_is_a_key(claims: dict[str, str], owner: str) -> None:
    assert share_owner(claims) == owner


def test_accounts_with_one_name_never_list_or_revoke_each_others_links(db_factory) -> None:  # type: ignore[no-untyped-def]
    with transaction(db_factory) as s:
        token = create_share(s, owner=share_owner(ANA), snapshot=SNAPSHOT, title="ana's").token
        legacy = create_share(s, owner="ana@example.com", snapshot=SNAPSHOT, title="old").token

    with transaction(db_factory) as s:
        assert [x.token for x in list_shares(s, owner=share_owner(OTHER_ANA))] == []
        assert not revoke_share(s, token=token, owner=share_owner(OTHER_ANA))
        assert [x.token for x in list_shares(s, owner=share_owner(ANA))] == [token]
        assert open_share(s, token=legacy) is not None  # an old link still opens...
        assert not revoke_share(s, token=legacy, owner=share_owner(ANA))  # ...and is nobody's
