from __future__ import annotations

import pytest

from studio.formatting import human_bytes, human_count


@pytest.mark.parametrize(
    ("size", "text"),
    [(0, "0 B"), (700, "700 B"), (2048, "2.0 KiB"), (5 * 2**20, "5.0 MiB"), (3 * 2**30, "3.0 GiB")],
    ids=["zero", "bytes", "kib", "mib", "gib"],
)
def test_human_bytes(size: int, text: str) -> None:
    assert human_bytes(size) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(None, "unknown"), (136, "136"), (1234, "1.23 K"), (4.2e9, "4.20 G")],
    ids=["none", "small", "kilo", "giga"],
)
def test_human_count(value: float | None, text: str) -> None:
    assert human_count(value) == text
