"""A profile checked by a run: the proposal when it runs, else the next sizes that do."""

from __future__ import annotations

from pathlib import Path

import pytest
from sized_models import build_blocks, build_counted, build_token_blocks

from optistudio.core.data.input_profile import InputProfile, propose_input_profile
from optistudio.core.data.model_inputs import ModelInputs
from optistudio.core.data.probe import (
    CHECKED,
    check_profile,
    unchecked_guesses,
)
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model


def checked(path: Path, **kwargs: object):  # type: ignore[no-untyped-def]
    info = inspect_model(path)
    proposal = propose_input_profile(info.inputs, metadata_keys=info.metadata_keys)
    return check_profile(path, info, proposal, **kwargs)  # type: ignore[arg-type]


def test_a_proposal_that_runs_is_kept_and_marked_checked(tmp_path: Path) -> None:
    model = build_blocks(tmp_path / "k32.onnx", 32)  # 224 = 7 x 32 runs

    check = checked(model)

    assert check.checked and check.runs == 1 and check.guesses == 2
    assert check.shapes == {"x": [1, 1, 224, 224]}
    assert check.how == "proposed, checked by a run"
    assert check.line() == "ran at x=1,1,224,224: proposed, checked by a run"
    assert all(why.endswith(CHECKED) for why in check.profile.guessed.values())
    assert unchecked_guesses(check.profile) == []


def test_a_guess_that_fails_gives_way_to_the_first_common_side_that_runs(tmp_path: Path) -> None:
    model = build_blocks(tmp_path / "k64.onnx", 64)  # 16 and 224 fail, 256 runs

    check = checked(model)

    assert check.shapes == {"x": [1, 1, 256, 256]} and check.runs == 2
    assert check.profile.shapes["x"] == [1, 1, 256, 256]
    assert check.how.startswith("after 224 failed (") and check.how.endswith(CHECKED)
    assert "Reshape" in check.how  # the runtime's reason for the failure
    assert check.profile.guessed["x.2"] == f"256: 224 did not run; {CHECKED}"


def test_a_reshape_to_a_constant_count_implies_the_side_before_the_common_ones(
    tmp_path: Path,
) -> None:
    model = build_counted(tmp_path / "c320.onnx", [1, 3 * 320 * 320])

    check = checked(model)

    assert check.shapes == {"x": [1, 3, 320, 320]}
    assert check.runs == 2  # 224, then 320 (not 256 first)


def test_the_metadata_image_size_is_tried_first(tmp_path: Path) -> None:
    model = build_blocks(tmp_path / "k96.onnx", 96, metadata={"imgsz": "[96, 96]"})

    check = checked(model)

    assert check.shapes == {"x": [1, 1, 96, 96]} and check.runs == 2


def test_a_token_sequence_tries_the_common_lengths(tmp_path: Path) -> None:
    model = build_token_blocks(tmp_path / "t256.onnx", 256)  # 128 and 64 fail

    check = checked(model)

    assert check.shapes == {"ids": [1, 256]} and check.runs == 3
    assert check.how.startswith("after 128, 64 failed")


def test_no_candidate_that_runs_names_the_input_the_sizes_and_the_flag(tmp_path: Path) -> None:
    model = build_counted(tmp_path / "odd.onnx", [1, 3, 7, 7000])  # no square fills it

    with pytest.raises(InvalidSpec) as caught:
        checked(model)

    message = caught.value.message
    assert message.startswith("x could not run at 224, 256, 320, 416, 512, 640 (last error: ")
    assert message.endswith("give its size with --shape x=1,3,H,W")
    assert "model card" in (caught.value.hint or "")


@pytest.mark.parametrize(
    ("limits", "tried"),
    [({"max_runs": 2}, "224, 256"), ({"seconds": 0.0}, "224")],
    ids=["at-most-2-runs", "no-time-for-a-second"],
)
def test_the_trials_are_bounded(tmp_path: Path, limits: dict[str, float], tried: str) -> None:
    model = build_counted(tmp_path / "odd.onnx", [1, 3, 7, 7000])

    with pytest.raises(InvalidSpec, match=f"could not run at {tried} \\(last error"):
        checked(model, **limits)


def test_what_the_user_gave_is_never_changed(tmp_path: Path) -> None:
    model = build_blocks(tmp_path / "k64.onnx", 64)

    check = checked(model, given=ModelInputs(dims={"x.2": 64}))

    assert check.shapes == {"x": [1, 1, 64, 256]}  # only the width was the profile's to try
    assert not check.profile.guessed["x.2"].endswith(CHECKED)
    assert check.profile.guessed["x.3"].endswith(CHECKED)


def test_full_shapes_given_leave_nothing_to_check(tmp_path: Path) -> None:
    model = build_blocks(tmp_path / "k64.onnx", 64)

    check = checked(model, given=ModelInputs(shapes={"x": [1, 1, 128, 64]}))

    assert check.runs == 0 and check.guesses == 0 and not check.checked
    assert check.how == "no size guessed" and check.profile == propose_input_profile(
        inspect_model(model).inputs
    )


def test_a_stored_profile_edited_by_its_user_is_tried_only_on_its_guesses(tmp_path: Path) -> None:
    model = build_blocks(tmp_path / "k64.onnx", 64)
    info = inspect_model(model)
    edited = InputProfile(
        shapes={"x": [1, 1, 64, 100]},
        batch_axes={"x": 0},
        guessed={"x.3": "100: the default"},  # the user set the height, left the width
    )

    check = check_profile(model, info, edited)

    assert check.shapes == {"x": [1, 1, 64, 128]}  # 100 -> 128, a multiple of 32 and of 64
    assert check.profile.shapes["x"][2] == 64


def test_a_profile_without_guesses_is_not_run(tmp_path: Path) -> None:
    model = build_blocks(tmp_path / "k64.onnx", 64)
    info = inspect_model(model)
    edited = InputProfile(shapes={"x": [1, 1, 100, 100]}, batch_axes={"x": 0})

    check = check_profile(model, info, edited)  # would fail: the user's to fix

    assert check.runs == 0 and check.guesses == 0 and check.profile == edited


def test_a_model_onnx_runtime_cannot_load_is_not_checked(tmp_path: Path) -> None:
    model = build_blocks(tmp_path / "k64.onnx", 64)
    info = inspect_model(model)
    proposal = propose_input_profile(info.inputs)
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(model.read_bytes()[:40])

    check = check_profile(broken, info, proposal)

    assert not check.checked and check.runs == 0 and check.guesses == 2
    assert check.how.startswith("proposed, not checked: ONNX Runtime could not load it")
    assert check.profile == proposal
    assert unchecked_guesses(check.profile) == ["x.2", "x.3"]
