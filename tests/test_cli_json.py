"""`--json` prints exactly one JSON document on stdout, for every command that takes it; what
libraries print (NNCF's warnings and progress bars, C++ logs) goes to stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from decoder_models import build_tiny_decoder
from diagnostic_models import build_cnn
from filelock import FileLock
from optimize_models import det_model, rms_norm_model
from test_cli import optimize_args

from optistudio.cli import build_parser
from optistudio.cli.batching import ACTIONS
from optistudio.core.video.clips import make_clip

QUICK = ["--min-seconds", "0.05", "--max-seconds", "1", "--min-runs", "5", "--warmup", "1"]
BATCHING = ["--max-batch-size", "2", "--profile", "{profile}"]

COMMANDS = {
    "bench": ["bench", "{tiny}", *QUICK],
    "bench-all": ["bench", "{tiny}", "--backend", "all", *QUICK],
    "bench-vs": ["bench", "{tiny}", "--vs", "{tiny}", *QUICK],
    "operator-profile": ["operator-profile", "{tiny}", "--runs", "3"],
    "profile": ["profile", "{tiny}", "--runs", "3"],  # the former name, still one document
    "soak": ["soak", "{tiny}", "--seconds", "1", "--batch", "1"],
    "backends": ["backends"],
    "recipes": ["recipes"],
    "jobs": ["jobs"],
    "models": ["models"],
    "models-delete": ["models", "delete", "{variant_id}"],  # without --yes: the plan only
    "results-delete": ["results", "delete", "{optimize_job}"],
    "jobs-delete": ["jobs", "delete", "{optimize_job}"],
    "compare": ["compare", "--variant", "{optimize_job}"],
    "export": ["export", "{variant_id}", "--out", "{tmp}/bundle.zip"],
    "serve": ["serve", "{tmp}/served.zip", "--port", "0", "--seconds", "0.3"],
    "inputs": ["inputs", "{tiny}"],
    "inputs-stored": ["inputs", "--model-id", "{variant_id}"],
    "batching-simulate": ["batching", "simulate", "{tiny}", *BATCHING, "--rate", "100"],
    "batching-recommend": ["batching", "recommend", "{tiny}", *BATCHING, "--rate", "100"]
    + ["--p99-budget-ms", "50"],
    "batching-verify": ["batching", "verify", "{tiny}", *BATCHING, "--rate", "50"]
    + ["--seconds", "0.5"],
    "video": ["video", "{cnn}", "--source", "{clip}", "--streams", "2", "--seconds", "0.3"],
    "llm-serve-whatif": ["llm", "serve-whatif", "{decoder}", "--rate", "20", "--steps", "4"]
    + ["--new-tokens", "8", "--requests", "50"],
}
"""Besides these, the `ran` fixture runs `batching latency-profile` and `optimize --save` (with
NNCF)."""


def optistudio(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(data_dir))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "optistudio.cli", *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


def one_document(done: subprocess.CompletedProcess[str]) -> object:
    """The whole of stdout as one JSON document (json.loads refuses anything around it)."""
    assert done.stdout.strip(), done.stderr[-2000:]
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> dict[str, object]:
    """A data folder with a saved optimization (NNCF's output on the way), and a batching
    profile: what the other commands start from, read-only. Made once per run (about 30 s):
    the first pytest-xdist worker to need it makes it under a file lock in the run's own
    folder, the others read what it wrote."""
    base = tmp_path_factory.getbasetemp()
    root = base if worker_id == "master" else base.parent
    tmp, made = root / "cli-json", root / "cli-json" / "made.json"
    with FileLock(str(root / "cli-json.lock")):
        if not made.exists():
            made.write_text(json.dumps(_make_ran(tmp)))
    runs = json.loads(made.read_text())
    done = {name: subprocess.CompletedProcess([], *runs[name]) for name in runs}
    return {"tmp": tmp, "data": tmp / "data", "tiny": tmp / "tiny.onnx", **done}


def _make_ran(tmp: Path) -> dict[str, tuple[int, str, str]]:
    """The optimization and the profile `ran` shares: (exit status, stdout, stderr) of each."""
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / "data"
    tiny, det = rms_norm_model(tmp / "tiny.onnx"), det_model(tmp / "det.onnx")
    optimized = optistudio(
        *optimize_args(det, recipe="graph,int8_nncf", seconds="0.1", out=tmp / "variants",
                       save=True), data_dir=data,
    )  # fmt: skip
    profiled = optistudio(
        "batching", "latency-profile", str(tiny), "--rate", "100", "--max-batch-size", "2", "--quick",
        "--out",
        str(tmp / "profile.json"), data_dir=data,
    )  # fmt: skip
    return {
        name: (done.returncode, done.stdout, done.stderr)
        for name, done in (("optimized", optimized), ("profiled", profiled))
    }


def test_optimize_with_nncf_prints_one_document_and_sends_nncf_to_stderr(ran) -> None:  # type: ignore[no-untyped-def]
    done = ran["optimized"]

    payload = one_document(done)

    assert done.returncode == 0, done.stderr[-2000:]
    assert "nncf" in done.stderr.lower()  # NNCF spoke, and not on stdout
    graph, nncf = payload["variants"]
    # OpenVINO has no Det: its variant is not applicable there (a sentence), not a failure
    assert (graph["status"], nncf["status"]) == ("made", "not_applicable")
    assert graph["model_id"] and nncf["model_id"] is None and nncf["path"] is None
    assert nncf["error"]["code"] == "model_load_failed" and "Det" in nncf["error"]["message"]
    assert f"{nncf['recipe']['name']}: " in done.stderr and "OpenVINO could not load" in done.stderr
    assert list(payload["files"]) == ["graph"]


def test_batching_profile_prints_one_document(ran) -> None:  # type: ignore[no-untyped-def]
    done = ran["profiled"]

    assert done.returncode == 0, done.stderr[-2000:]
    assert one_document(done)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_json_command_prints_one_document(ran, name: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path  # what a command writes, and the models it builds: this test's own
    optimized = one_document(ran["optimized"])
    variant_id = optimized["variants"][0]["model_id"]
    fill = {"tiny": ran["tiny"], "tmp": tmp, "profile": ran["tmp"] / "profile.json"}
    fill |= {"optimize_job": optimized["job_id"]}
    fill |= {"cnn": build_cnn(tmp / "cnn.onnx"), "clip": make_clip(tmp / "clip.mp4", seconds=1)}
    fill |= {"decoder": build_tiny_decoder(tmp / "decoder")}
    args = [arg.format(**fill, variant_id=variant_id) for arg in COMMANDS[name]]
    if name == "serve":  # its own bundle: the export case may run after this one
        optistudio(
            "export", str(variant_id), "--out", str(tmp / "served.zip"), data_dir=ran["data"]
        )

    done = optistudio(*args, data_dir=ran["data"])

    assert done.returncode == 0, done.stderr[-2000:]
    assert one_document(done) is not None


def test_nothing_made_is_exit_2_with_the_document_still_one(ran, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    det = det_model(tmp_path / "det.onnx")

    done = optistudio(
        *optimize_args(det, recipe="int8_nncf", seconds="0.1", out=tmp_path / "v"),
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 2
    [variant] = one_document(done)["variants"]
    assert variant["status"] == "not_applicable"
    assert "error: no variant could be made" in done.stderr


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["results"], "optistudio results: the following arguments are required"),
        (["jobs", "--bogus"], "optistudio: unrecognized arguments: --bogus"),
        (["bench", "m.onnx", "--batch", "one"], "optistudio bench: argument --batch"),
    ],
)
def test_a_usage_error_is_exit_2_with_one_error_document(
    args: list[str], said: str, tmp_path: Path
) -> None:
    done = optistudio(*args, data_dir=tmp_path / "data")

    assert done.returncode == 2
    error = one_document(done)["error"]  # type: ignore[index]
    assert error["code"] == "invalid_spec" and error["message"].startswith(said), error
    assert error["hint"].startswith("See `optistudio") and "usage:" in done.stderr


def test_the_list_covers_every_command_that_takes_json() -> None:
    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    with_json = {
        name
        for name, parser in commands.items()
        if any("--json" in action.option_strings for action in parser._actions)
    }
    covered = {args[0] for args in COMMANDS.values()} | {"optimize", "batching"}
    batching_covered = {args[1] for args in COMMANDS.values() if args[0] == "batching"}

    assert with_json <= covered
    assert set(ACTIONS) <= batching_covered | {"latency-profile"}


def test_c_level_and_library_output_go_to_stderr_around_the_document() -> None:
    script = (
        "import os, sys\n"
        "from optistudio.cli.output import json_stdout, print_json\n"
        "with json_stdout(True):\n"
        "    os.write(1, b'C++ log line\\n')\n"
        "    print('a library print')\n"
        "    print_json({'ok': True})\n"
        "print('after the command')\n"
    )

    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )

    assert done.returncode == 0, done.stderr
    assert done.stdout == '{\n  "ok": true\n}\nafter the command\n'
    assert "C++ log line" in done.stderr and "a library print" in done.stderr


def test_recipes_json_lists_recipes_passes_and_this_cpus_int8_choice(tmp_path: Path) -> None:
    done = optistudio("recipes", data_dir=tmp_path / "data")

    payload = one_document(done)

    assert done.returncode == 0, done.stderr[-2000:]
    recipes = {recipe["name"]: recipe for recipe in payload["recipes"]}  # type: ignore[index]
    assert [step["step"] for step in recipes["int8_static"]["steps"]] == ["simplify", "int8_static"]
    assert {"int8_static", "int8_dynamic", "fusion"} <= {p["name"] for p in payload["passes"]}  # type: ignore[index]
    assert payload["auto"]["int8"]["weights"] in ("7-bit", "8-bit")  # type: ignore[index]


def test_recipes_json_says_which_precision_recipes_apply_here_and_why(tmp_path: Path) -> None:
    from optistudio.core.backends import get_backend
    from optistudio.core.machine.precisions import native_float

    done = optistudio("recipes", data_dir=tmp_path / "data")

    payload = one_document(done)
    recipes = {recipe["name"]: recipe for recipe in payload["recipes"]}  # type: ignore[index]
    openvino = get_backend("openvino").availability().ok
    bf16 = native_float("bf16").native and openvino
    assert recipes["bf16"]["applies"] is bf16
    assert (recipes["bf16"]["why_not"] is None) is bf16
    assert recipes["int8_nncf_bf16"]["applies"] is bf16
    assert (recipes["int8_nncf_bf16"]["precision"], recipes["bf16"]["backend"]) == (
        "bf16",
        "openvino",
    )
    assert recipes["fp16"]["applies"] is native_float("fp16").native
    if not native_float("bf16").native:
        assert "AVX512-BF16 or AMX-BF16" in recipes["bf16"]["why_not"]
    assert all(r["applies"] or r["why_not"] for r in recipes.values())
    assert payload["auto"]["floats"]["bf16"]["native"] is native_float("bf16").native  # type: ignore[index]
    assert {n["precision"] for n in payload["auto"]["not_offered"]} == {"bf16", "int8+bf16"}  # type: ignore[index]
