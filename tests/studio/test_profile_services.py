"""The card's input-profile table: what it shows, and what a user's edits become."""

from __future__ import annotations

import pytest

from optistudio.core.data.profile import propose_profile
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.studio.profile_services import profile_from_rows, profile_rows


def card(*inputs: TensorSpec) -> ModelInfo:
    return ModelInfo(
        sha256="0" * 64,
        size_bytes=1,
        ir_version=3,
        opsets={"": 11},
        op_histogram={},
        node_count=0,
        parameter_count=0,
        inputs=list(inputs),
        outputs=[],
    )


REC = card(
    TensorSpec(name="x", dtype="float32", shape=["?", 3, 48, "?"]),
    TensorSpec(name="sr", dtype="int64", shape=[]),
)


def test_the_table_shows_the_guesses_and_reads_back_as_the_same_profile():
    profile = propose_profile(REC.inputs)

    rows = profile_rows(profile, REC)

    x, sr = rows.to_dict("records")
    assert x["declared"] == "[?, 3, 48, ?]" and x["shape"] == "1, 3, 48, 320"
    assert x["batch axis"] == "0" and "text line 48 high" in x["how it was set"]
    assert sr["batch axis"] == "none" and sr["value"] == "16000"
    assert profile_from_rows(rows.to_dict("records"), REC, before=profile) == profile


def test_an_edited_width_is_no_longer_a_guess_and_a_cleared_value_feeds_data():
    profile = propose_profile(REC.inputs)
    rows = profile_rows(profile, REC).to_dict("records")
    rows[0]["shape"] = "1x3x48x640"
    rows[1]["value"] = ""

    edited = profile_from_rows(rows, REC, before=profile)

    assert edited.shapes["x"] == [1, 3, 48, 640] and edited.values == {}
    assert edited.guessed == {}


@pytest.mark.parametrize(
    ("column", "text", "words"),
    [
        ("shape", "1, 3, forty-eight, 320", "sizes separated by commas"),
        ("shape", "1, 3, 32, 320", "does not fit input 'x'"),
        ("batch axis", "first", "axis number or 'none'"),
        ("value", "lots", "must be a number"),
    ],
)
def test_a_bad_cell_names_the_input_and_what_to_type(column, text, words):
    profile = propose_profile(REC.inputs)
    rows = profile_rows(profile, REC).to_dict("records")
    rows[0][column] = text

    with pytest.raises(InvalidSpec, match=words):
        profile_from_rows(rows, REC, before=profile)
