"""The verbs renamed so that each names its profile still parse under their former names, as
people and scripts type them: `profile` is `operator-profile`, `batching profile` is
`batching latency-profile`; the help names today's verb and marks the former one."""

from __future__ import annotations

import pytest

from optistudio.cli import build_parser
from optistudio.cli.batching import ACTIONS, FORMER_ACTIONS
from optistudio.cli.diagnostics import OPERATOR_PROFILE


@pytest.mark.parametrize("typed", ["operator-profile", "profile"])
def test_the_operator_profile_runs_under_either_name(typed: str) -> None:
    args = build_parser().parse_args([typed, "m.onnx", "--runs", "2"])

    assert args.command == OPERATOR_PROFILE == "operator-profile"
    assert args.runs == 2


@pytest.mark.parametrize("typed", ["latency-profile", "profile"])
def test_the_latency_profile_runs_under_either_name(typed: str) -> None:
    args = build_parser().parse_args(["batching", typed, "m.onnx", "--max-batch-size", "4"])

    assert (args.command, args.action, args.max_batch_size) == ("batching", "latency-profile", 4)


def test_a_former_action_is_no_choice_of_its_own() -> None:
    assert FORMER_ACTIONS == {"profile": "latency-profile"}
    assert "profile" not in ACTIONS and set(FORMER_ACTIONS.values()) <= set(ACTIONS)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["batching", "profiles", "m.onnx"])


def test_the_batching_help_marks_the_former_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["batching", "--help"])

    shown = " ".join(capsys.readouterr().out.split())
    assert "{latency-profile,simulate,verify,recommend}" in shown
    assert "'profile': the former name of latency- profile, still accepted" in shown or (
        "'profile': the former name of latency-profile, still accepted" in shown
    )
