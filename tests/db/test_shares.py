"""Share links: unguessable tokens, frozen snapshots, revocation by the owner only."""

from __future__ import annotations

from typing import Any

from optistudio.db.session import transaction
from optistudio.db.shares import create_share, is_well_formed, list_shares, open_share, revoke_share

SNAPSHOT: dict[str, Any] = {"rows": [{"key": "1.onnxruntime.1.4", "p50_ms": 1.25}], "title": "t"}


def share(factory: Any, owner: str = "ana", snapshot: dict[str, Any] | None = None) -> str:
    with transaction(factory) as s:
        return create_share(s, owner=owner, snapshot=snapshot or SNAPSHOT, title="t").token


def test_tokens_carry_at_least_128_random_bits_and_differ(db_factory: Any) -> None:
    tokens = {share(db_factory) for _ in range(5)}
    assert len(tokens) == 5
    for token in tokens:
        assert is_well_formed(token)
        assert len(token) * 6 >= 128  # URL-safe base64: 6 bits a character


def test_snapshot_is_frozen_against_later_changes_of_the_source(db_factory: Any) -> None:
    source = {"rows": [{"key": "a", "p50_ms": 1.0}]}
    token = share(db_factory, snapshot=source)
    source["rows"].append({"key": "b", "p50_ms": 2.0})
    source["rows"][0]["p50_ms"] = 99.0
    with transaction(db_factory) as s:
        opened = open_share(s, token=token)
        assert opened is not None
        assert opened.snapshot == {"rows": [{"key": "a", "p50_ms": 1.0}]}


def test_revoked_unknown_and_malformed_tokens_look_alike(db_factory: Any) -> None:
    token = share(db_factory)
    with transaction(db_factory) as s:
        assert not revoke_share(s, token=token, owner="someone else")
        assert open_share(s, token=token) is not None
        assert revoke_share(s, token=token, owner="ana")
        assert not revoke_share(s, token=token, owner="ana")  # already revoked
    with transaction(db_factory) as s:
        assert open_share(s, token=token) is None
        assert open_share(s, token="A" * 43) is None  # well-formed, never issued
        assert open_share(s, token="'; DROP TABLE shares; --") is None
        assert open_share(s, token="") is None
        assert [x.revoked_at is not None for x in list_shares(s, owner="ana")] == [True]
        assert list_shares(s, owner="bob") == []
