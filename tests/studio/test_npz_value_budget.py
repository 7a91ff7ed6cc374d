"""The card's uploaded array (a fixed value of at most MAX_VALUE_ELEMENTS elements) is judged
from its .npz headers: a few megabytes declaring a 1 GiB array are refused in one sentence
naming the array, its shape and the limit, with far less than the array allocated (issue 39,
case 4: the studio process used to load every array, 1.2 GB, before refusing)."""

from __future__ import annotations

import io
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from npz_bombs import npz_bomb

from optistudio.core.errors import InvalidSpec
from optistudio.studio.input_profile_services import array_from_npz

PEAK_LIMIT = 50 * 1024**2


def test_a_declared_gigabyte_is_refused_from_its_header(tmp_path: Path) -> None:
    data = npz_bomb(tmp_path / "bomb.npz", name="state").read_bytes()

    tracemalloc.start()
    try:
        with pytest.raises(InvalidSpec) as refused:
            array_from_npz("state", data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

    assert refused.value.message == (
        "The array 'state' for input 'state' declares shape [1, 268435456] (268,435,456 "
        "elements); a fixed value holds at most 4,096."
    )
    assert "--inputs FILE.npz" in (refused.value.hint or "")
    assert peak < PEAK_LIMIT, f"{peak / 1024**2:.0f} MiB allocated before the refusal"


def test_only_the_chosen_array_is_loaded_and_odd_dtypes_are_refused_by_name() -> None:
    buffer = io.BytesIO()
    np.savez(buffer, state=np.ones((2, 3), np.float32), other=np.zeros(10**6, np.uint8))
    assert array_from_npz("state", buffer.getvalue()).shape == [2, 3]

    buffer = io.BytesIO()
    np.savez(buffer, state=np.ones(4, np.int16))
    with pytest.raises(InvalidSpec, match="'state' for input 'state' is int16"):
        array_from_npz("state", buffer.getvalue())
