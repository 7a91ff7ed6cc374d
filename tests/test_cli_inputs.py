"""The same input flags on every command that runs a model: --shape, --dim, --value, --inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from audio_models import SAMPLE_RATE, build_anonymous_state_model, build_audio_model
from test_cli import optistudio

from optistudio.cli import build_parser
from optistudio.cli.args import InputOptions, input_options
from optistudio.core.errors import InvalidSpec

COMMANDS = [
    pytest.param(["bench", "m.onnx"], id="bench"),
    pytest.param(["optimize", "m.onnx", "--out", "variants"], id="optimize"),
    pytest.param(["operator-profile", "m.onnx"], id="operator-profile"),
    pytest.param(["soak", "m.onnx"], id="soak"),
    *(pytest.param(["batching", action, "m.onnx"], id=f"batching-{action}") for action in
      ("latency-profile", "simulate", "verify", "recommend")),
]  # fmt: skip
FLAGS = ["--shape", "input=3,512", "--shape", "state=2,3,16", "--dim", "time=512"]
AUDIO_FLAGS = ["--shape", "input=3,512", "--shape", "state=2,3,16", "--value", "sr=16000"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_the_four_input_flags(command: list[str], tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", mask=np.ones((1, 7), np.int64))
    argv = [*command, *FLAGS, "--value", "sr=16000", "--inputs", str(tmp_path / "in.npz"),
            "--batch-axis", "state=1"]  # fmt: skip

    options = input_options(build_parser().parse_args(argv))

    assert options == InputOptions(
        shapes={"input": [3, 512], "state": [2, 3, 16], "mask": [1, 7]},
        dims={"time": 512},
        values={"sr": 16000.0},
        inputs_file=str((tmp_path / "in.npz").resolve()),
        batch_axes={"state": 1},
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        pytest.param(["--shape", "x=1,a"], "Bad --shape 'x=1,a': expected NAME=D1,D2,...", id="shape"),
        pytest.param(["--shape", "=1,2"], "Bad --shape '=1,2'", id="shape-without-name"),
        pytest.param(["--shape", "x=1,0"], "Bad --shape 'x=1,0'", id="shape-zero"),
        pytest.param(["--dim", "time"], "Bad --dim 'time': expected NAME=N", id="dim-no-size"),
        pytest.param(["--dim", "time=1,2"], "Bad --dim 'time=1,2'", id="dim-two-sizes"),
        pytest.param(["--value", "sr=fast"], "Bad --value 'sr=fast': expected NAME=NUMBER", id="value"),
        pytest.param(["--value", "sr=nan"], "Bad --value 'sr=nan'", id="value-nan"),
        pytest.param(["--inputs", "missing.npz"], "Bad --inputs 'missing.npz'", id="inputs-missing"),
        pytest.param(["--batch-axis", "state=one"], "Bad --batch-axis 'state=one'", id="batch-axis"),
    ],
)  # fmt: skip
def test_a_bad_input_flag_is_named_with_its_form(flags: list[str], message: str) -> None:
    args = build_parser().parse_args(["bench", "m.onnx", *flags])

    with pytest.raises(InvalidSpec) as caught:
        input_options(args)

    assert caught.value.message.startswith(message)
    expected_hint = "Save one" if flags[0] == "--inputs" else f"For example {flags[0]} "
    assert caught.value.hint.startswith(expected_hint)


def test_a_shape_given_twice_is_refused(tmp_path: Path) -> None:
    np.savez(tmp_path / "in.npz", input=np.ones((1, 4), np.float32))
    argv = ["bench", "m.onnx", "--shape", "input=1,4", "--inputs", str(tmp_path / "in.npz")]

    with pytest.raises(InvalidSpec, match=r"--shape and --inputs both give input\(s\) \['input'\]"):
        input_options(build_parser().parse_args(argv))


@pytest.fixture(scope="module")
def audio(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_audio_model(tmp_path_factory.mktemp("cli_audio") / "audio.onnx")


def test_bench_runs_an_audio_model_at_the_shapes_and_rate_given(audio: Path, tmp_path: Path):
    quick = ["--min-seconds", "0.05", "--max-seconds", "1", "--min-runs", "5", "--warmup", "1"]

    done = optistudio("bench", str(audio), *AUDIO_FLAGS, "--json", *quick, data_dir=tmp_path)

    assert done.returncode == 0, done.stderr
    [result] = json.loads(done.stdout)["results"]
    assert result["batch_size"] == 3
    assert result["input_shapes"] == {"input": [3, 512], "state": [2, 3, 16], "sr": []}


def test_profile_and_soak_take_the_same_flags(audio: Path, tmp_path: Path) -> None:
    profile = optistudio(
        "operator-profile", str(audio), *AUDIO_FLAGS, "--runs", "3", "--json", data_dir=tmp_path
    )
    soak = optistudio(
        "soak", str(audio), "--value", f"sr={SAMPLE_RATE}", "--batch", "1,2", "--seconds", "0.3",
        "--json", data_dir=tmp_path,
    )  # fmt: skip

    assert profile.returncode == 0, profile.stderr
    assert json.loads(profile.stdout)["profile"]["batch_size"] == 3
    assert soak.returncode == 0, soak.stderr
    variants = json.loads(soak.stdout)["variants"]
    assert {tuple(v["state"]) for v in variants} >= {(2, 1, 16), (2, 2, 16)}


def test_a_bad_value_with_json_is_one_error_document(audio: Path, tmp_path: Path) -> None:
    done = optistudio("soak", str(audio), "--value", "sr=16k", "--json", data_dir=tmp_path)

    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert error["code"] == "invalid_spec"
    assert error["message"] == "Bad --value 'sr=16k': expected NAME=NUMBER."
    assert error["hint"] == "For example --value sr=16000"


def test_optimize_passes_the_input_flags_to_its_run() -> None:
    from optistudio.cli.optimize import optimize_spec

    args = build_parser().parse_args(["optimize", "m.onnx", "--out", "o", *AUDIO_FLAGS])

    run_spec = optimize_spec(args).optimize_spec()

    assert run_spec.shapes == {"input": [3, 512], "state": [2, 3, 16]}
    assert run_spec.values == {"sr": 16000.0}


def test_inputs_proposes_a_files_profile_naming_its_guesses(audio: Path, tmp_path: Path) -> None:
    done = optistudio("inputs", str(audio), "--json", data_dir=tmp_path)

    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["lines"] == ["input: [batch, 16]", "state: [2, batch, 16]", "sr: [] = 16000"]
    assert set(shown["profile"]["guessed"]) == {"input.1", "sr", "state.batch"}
    assert (
        "axis 1: dim 'batch' is the other inputs' batch"
        in shown["profile"]["guessed"]["state.batch"]
    )
    assert not shown["saved"]


def test_inputs_sets_a_stored_models_profile_and_the_next_job_runs_at_it(
    audio: Path, tmp_path: Path
) -> None:
    stored = optistudio("bench", str(audio), "--value", "sr=16000", "--save", "--json",
                        "--min-seconds", "0", "--max-seconds", "0.5", data_dir=tmp_path)  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    model_id = json.loads(stored.stdout)["model_id"]

    edit = ["inputs", "--model-id", str(model_id), "--shape", "input=1,400", "--json"]
    saved = optistudio(*edit, "--save", data_dir=tmp_path)
    again = optistudio("inputs", "--model-id", str(model_id), "--json", data_dir=tmp_path)
    refused = optistudio(*edit[:3], "--shape", "input=1,2,3", "--save", data_dir=tmp_path)

    assert saved.returncode == 0, saved.stderr
    assert json.loads(again.stdout)["lines"][0] == "input: [batch, 400]"
    assert "input.1" not in json.loads(again.stdout)["profile"]["guessed"]
    assert refused.returncode == 2 and "does not fit input 'input'" in refused.stderr


def test_inputs_moves_a_batch_axis_and_stores_an_array_value(tmp_path: Path) -> None:
    """A state whose batch dim is anonymous: bench takes --batch-axis state=1, and the stored
    profile takes the axis and the state's initial value from an .npz."""
    model = build_anonymous_state_model(tmp_path / "audio.onnx")
    initial = np.full((2, 1, 16), 0.5, np.float32)
    np.savez(tmp_path / "state.npz", state=initial)
    stored = optistudio("bench", str(model), "--batch-axis", "state=1", "--value", "sr=16000",
                        "--batch", "1,2", "--save", "--json", "--min-seconds", "0",
                        "--max-seconds", "0.5", data_dir=tmp_path)  # fmt: skip
    assert stored.returncode == 0, stored.stderr
    model_id = str(json.loads(stored.stdout)["model_id"])

    edit = ["inputs", "--model-id", model_id, "--batch-axis", "state=1", "--json"]
    saved = optistudio(*edit, "--value", f"state=@{tmp_path / 'state.npz'}", "--save",
                       data_dir=tmp_path)  # fmt: skip
    shown = json.loads(
        optistudio("inputs", "--model-id", model_id, "--json", data_dir=tmp_path).stdout
    )
    bad = optistudio(*edit[:3], "--batch-axis", "state=3", "--save", "--json", data_dir=tmp_path)

    assert saved.returncode == 0, saved.stderr
    assert json.loads(saved.stdout)["saved"]
    assert shown["profile"]["batch_axes"]["state"] == 1
    value = shown["profile"]["values"]["state"]
    assert value["shape"] == [2, 1, 16] and value["data"] == initial.ravel().tolist()
    assert "state: [2, batch, 16] = float32 [2, 1, 16] array" in shown["lines"]
    assert bad.returncode == 2 and "has 3 axes" in json.loads(bad.stdout)["error"]["message"]


def test_a_value_from_an_npz_too_big_is_refused_with_the_way_out(tmp_path: Path) -> None:
    np.savez(tmp_path / "big.npz", state=np.zeros((2, 64, 64), np.float32))
    parser = build_parser()
    args = parser.parse_args(["bench", "m.onnx", "--value", f"state=@{tmp_path / 'big.npz'}"])

    with pytest.raises(InvalidSpec, match="at most 4096") as refused:
        input_options(args)
    assert "--inputs" in (refused.value.hint or "")


def test_a_decoder_has_no_input_profile_and_says_what_times_it(tmp_path: Path) -> None:
    from decoder_models import build_tiny_decoder

    model = build_tiny_decoder(tmp_path / "decoder")
    done = optistudio("inputs", str(model.parent), "--json", data_dir=tmp_path / "data")

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["profile"] is None and payload["decoder"]["layers"] == 2
    assert "no input profile applies" in payload["note"] and "optistudio bench" in payload["note"]
