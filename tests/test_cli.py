"""The `optistudio` command as a user runs it: its commands in this process (tests/cli_runner.py), the
entry point and the database errors in real processes, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from cli_runner import run_in_process

QUICK = ["--min-seconds", "0.05", "--max-seconds", "1", "--min-runs", "5", "--warmup", "1"]


def optistudio(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    """`optistudio ARGS` on the data folder, in this process (tests/cli_runner.py)."""
    return run_in_process(
        list(args), set_env={"OPTISTUDIO_DATA_DIR": str(data_dir)},
        unset_env=("OPTISTUDIO_DATABASE_URL",),
    )  # fmt: skip


def optimize_args(
    model: Path,
    *flags: str,
    out: Path,
    recipe: str | None = None,
    seconds: str | None = None,
    as_json: bool = False,
    save: bool = False,
) -> list[str]:
    """`optimize MODEL [--recipe R] [--seconds S] FLAGS --out OUT [--json] [--save]`: the
    command line every optimize test builds, FLAGS being what one test sets beyond it."""
    picked = [
        *(["--recipe", recipe] if recipe else []),
        *(["--seconds", seconds] if seconds else []),
    ]
    ending = [*(["--json"] if as_json else []), *(["--save"] if save else [])]
    return ["optimize", str(model), *picked, *flags, "--out", str(out), *ending]


def test_bench_json_has_the_stored_fields(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio(
        "bench",
        str(tiny_model),
        "--batch",
        "1,4",
        "--threads",
        "1",
        "--json",
        *QUICK,
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert [r["batch_size"] for r in payload["results"]] == [1, 4]
    first = payload["results"][0]
    assert {
        "p50_ms",
        "p90_ms",
        "p95_ms",
        "p99_ms",
        "mean_ms",
        "std_ms",
        "throughput",
        "peak_rss_mb",
        "threads",
        "stable",
        "samples",
    } <= set(first)
    assert first["threads"] == 1
    assert "isa_flags" in payload["environment"]
    assert not (tmp_path / "data" / "optistudio.db").exists()


def test_bench_save_stores_model_and_result(tiny_model: Path, tmp_path: Path) -> None:
    from optistudio.db.queries import get_job, results_rows
    from optistudio.db.session import make_session_factory, transaction

    data = tmp_path / "data"
    first = json.loads(
        optistudio("bench", str(tiny_model), "--json", "--save", *QUICK, data_dir=data).stdout
    )
    second = json.loads(
        optistudio("bench", str(tiny_model), "--json", "--save", *QUICK, data_dir=data).stdout
    )

    assert first["model_id"] == second["model_id"]
    assert first["job_id"] != second["job_id"]
    factory = make_session_factory(f"sqlite:///{data / 'optistudio.db'}")
    with transaction(factory) as s:
        job = get_job(s, job_id=second["job_id"])
        assert job.status.value == "succeeded" and job.worker.startswith("cli@")
        p50 = [r for r in results_rows(s, job_ids=[second["job_id"]]) if r["metric"] == "p50_ms"]
    assert len(p50) == 2  # batch 1 and 8


def test_an_unset_dynamic_dim_runs_at_the_checked_proposal_and_says_so(tmp_path: Path) -> None:
    from optistudio.core.model.samples import build_sample

    model = build_sample("tiny_mlp_tokens", tmp_path)

    done = optistudio("bench", str(model), "--batch", "1", *QUICK, data_dir=tmp_path / "d")

    assert done.returncode == 0, done.stderr
    ran = "inputs: ran at input_ids=1,128 attention_mask=1,128: proposed, checked by a run"
    assert ran in done.stderr
    assert "set to 16" not in done.stderr  # no hidden default any more
    assert "batch 1 inputs: input_ids [1, 128], attention_mask [1, 128]" in done.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [(b"", "empty"), (b"hello, not a model", "not an ONNX model")],
    ids=["empty-file", "text-file"],
)
def test_refused_file_exits_non_zero_without_traceback(tmp_path, content, message) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(content)

    done = optistudio("bench", str(bad), data_dir=tmp_path / "data")

    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr


def test_a_refusal_with_json_is_one_error_document_on_stdout(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"hello, not a model")

    done = optistudio("bench", str(bad), "--json", data_dir=tmp_path / "data")

    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert set(error) == {"code", "message", "hint"}
    assert error["code"] == "model_rejected"
    assert "not an ONNX model" in error["message"] and error["hint"]
    assert error["hint"] not in error["message"]
    lines = done.stderr.splitlines()
    assert f"error: {error['message']}" in lines and f"hint: {error['hint']}" in lines
    assert "Traceback" not in done.stderr


def test_a_failed_saved_job_is_raised_again_with_its_stored_fields() -> None:
    from types import SimpleNamespace

    from optistudio.cli.errors import job_failure
    from optistudio.core.errors import PassFailed
    from optistudio.db.models import JobStatus

    job = SimpleNamespace(
        status=JobStatus.failed,
        is_terminal=True,
        message="int8_static cannot quantize op 'Foo'.",
        error_code="pass_failed",
        error_hint="Try the fp16 recipe.",
        error_detail=None,
    )

    error = job_failure(job, 5)

    assert isinstance(error, PassFailed)
    assert (error.message, error.hint) == (job.message, job.error_hint)
    assert str(job_failure(None, 5)) == "Job 5 vanished."


def test_bad_option_names_the_field(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio(
        "bench",
        str(tiny_model),
        "--max-seconds",
        "0.1",
        "--min-seconds",
        "5",
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 2
    assert "max_seconds must be at least min_seconds (0.1 s < 5 s)" in done.stderr
    assert "lower min_seconds with it, or raise max_seconds" in done.stderr


def test_bench_vs_prints_the_paired_ratio_and_verdict(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio(
        "bench",
        str(tiny_model),
        "--vs",
        str(tiny_model),
        "--threads",
        "1",
        "--min-seconds",
        "0.3",
        "--json",
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["verdict"] == "no significant difference"
    assert payload["low"] <= payload["ratio"] <= payload["high"]
    assert payload["confidence"] == 0.95
    assert "B takes" in payload["sentence"]


def test_bench_vs_takes_one_batch_size(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio(
        "bench",
        str(tiny_model),
        "--vs",
        str(tiny_model),
        "--batch",
        "1,8",
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 2
    assert "--vs compares at one batch size" in done.stderr


def test_cpus_pins_the_run_and_the_json_records_it(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio(
        "bench", str(tiny_model), "--cpus", "0", "--json", *QUICK, data_dir=tmp_path / "data"
    )

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert payload["environment"]["affinity"] == [0]
    assert payload["spec"]["cpu_affinity"] == [0]


def test_optimize_json_lists_variants_with_files_and_figures(tiny_model: Path, tmp_path: Path):
    from optistudio.core.optimize.headline import headline
    from optistudio.core.optimize.run import OptimizeReport

    out = tmp_path / "variants"

    done = optistudio(
        *optimize_args(tiny_model, recipe="graph", seconds="0.2", out=out, as_json=True),
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    [variant] = payload["variants"]
    assert variant["recipe"]["name"] == "graph"
    assert variant["accuracy"]["mean_cosine"] == pytest.approx(1.0, abs=1e-5)
    assert variant["speedup"] > 0 and variant["ratio_low"] <= variant["ratio_high"]
    assert Path(payload["files"]["graph"]).exists()
    report = OptimizeReport.model_validate({k: v for k, v in payload.items() if k != "files"})
    assert report.headline == headline(report.variants, report.chosen)
    assert report.headline.startswith(("Chosen: Graph optimization, ", "Keep the original"))


def test_optimize_save_stores_the_variant_beside_its_original(tiny_model: Path, tmp_path: Path):
    from optistudio.db.queries import get_model
    from optistudio.db.session import make_session_factory, transaction

    data = tmp_path / "data"
    args = optimize_args(
        tiny_model, recipe="graph", seconds="0.2", out=tmp_path / "v", as_json=True, save=True
    )
    done = optistudio(*args, data_dir=data)

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    variant_id = payload["variants"][0]["model_id"]
    factory = make_session_factory(f"sqlite:///{data / 'optistudio.db'}")
    with transaction(factory) as s:
        variant = get_model(s, model_id=variant_id)
        assert variant.parent_id == payload["model_id"]
        assert variant.recipe["name"] == "graph"


def test_optimize_with_mismatched_data_names_the_problem(tiny_model: Path, tmp_path: Path):
    import numpy as np

    calib = tmp_path / "calib.npz"
    np.savez(calib, wrong_name=np.zeros((4, 16), dtype=np.float32))

    done = optistudio(
        *optimize_args(tiny_model, "--calib", str(calib), out=tmp_path / "v"),
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 2
    assert "x" in done.stderr and "wrong_name" in done.stderr
    assert "Traceback" not in done.stderr


def test_bench_all_runs_every_available_backend_and_says_why_others_are_skipped(
    tiny_model: Path, tmp_path: Path
) -> None:
    from optistudio.core.backends import backends

    done = optistudio(
        "bench",
        str(tiny_model),
        "--backend",
        "all",
        "--batch",
        "1",
        "--json",
        *QUICK,
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    ran = {run["results"][0]["backend"] for run in payload["runs"]}
    available = {b.name for b in backends if b.create().availability().ok}
    assert ran == available and "onnxruntime" in ran
    assert set(payload["skipped"]) == {b.name for b in backends} - available
    assert all(reason for reason in payload["skipped"].values())


def test_bench_all_precisions_checks_outputs_and_says_which_precisions_were_refused(
    tiny_model: Path, tmp_path: Path
) -> None:
    done = optistudio(
        "bench",
        str(tiny_model),
        "--backend",
        "all",
        "--precision",
        "all",
        "--batch",
        "1",
        "--json",
        *QUICK,
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    ran = {(run["spec"]["backend"], run["spec"]["precision"]) for run in payload["runs"]}
    assert ("onnxruntime", "fp32") in ran and ("onnxruntime", "int8") in ran
    assert "Valid precisions: fp32, int8" in payload["skipped"]["onnxruntime fp16"]
    for run in payload["runs"]:
        reference = run["spec"]["backend"] == "onnxruntime" and run["spec"]["precision"] == "fp32"
        check = run["output_check"]
        assert (check is None) if reference else check["passed"], run["spec"]


def test_bench_precision_all_needs_backend_all(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio("bench", str(tiny_model), "--precision", "all", data_dir=tmp_path / "d")
    assert done.returncode == 2
    assert "--precision all goes with --backend all" in done.stderr


def test_backends_json_lists_availability_with_reasons(tmp_path: Path) -> None:
    done = optistudio("backends", "--json", data_dir=tmp_path / "data")

    assert done.returncode == 0, done.stderr
    listed = {entry["name"]: entry for entry in json.loads(done.stdout)}
    assert listed["onnxruntime"]["available"] is True
    assert listed["tensorrt"]["available"] is False and listed["tensorrt"]["reason"]
    cann = listed["onnxruntime"]["providers"]["cann"]
    assert cann == {
        "device": "npu",
        "available": False,
        "reason": "needs Huawei's Ascend CANN toolkit and an Ascend NPU driver; "
        "onnxruntime-cann is not installed",
    }
    assert listed["onnxruntime"]["providers"]["cpu"]["available"] is True


def test_bench_refuses_the_cann_provider_in_one_sentence(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio("bench", str(tiny_model), "--provider", "cann", data_dir=tmp_path / "d")

    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    first = done.stderr.strip().splitlines()[0]
    assert "has no cann execution provider" in first
    assert "Ascend CANN toolkit and an Ascend NPU driver" in first


def test_optimize_refuses_an_unknown_accuracy_output(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio(
        *optimize_args(
            tiny_model, "--accuracy-output", "embedding", recipe="graph", out=tmp_path / "v"
        ),
        data_dir=tmp_path / "data",
    )

    assert done.returncode == 2
    assert "no output 'embedding'. Its outputs: y" in done.stderr


def test_optimize_calibrates_on_a_folder_of_images(tmp_path: Path) -> None:
    import numpy as np
    from PIL import Image

    from optistudio.core.model.samples import build_sample

    model = build_sample("tiny_cnn", tmp_path)  # input image: [batch, 1, 28, 28]
    images = tmp_path / "images"
    images.mkdir()
    rng = np.random.default_rng(0)
    for index in range(6):
        pixels = rng.integers(0, 255, size=(40, 30), dtype=np.uint8)
        Image.fromarray(pixels, mode="L").save(images / f"digit{index}.png")

    calibrated = ("--calib", str(images), "--image-color", "GRAY")
    args = optimize_args(
        model, *calibrated, recipe="int8_static", seconds="0.2", out=tmp_path / "v", as_json=True
    )
    done = optistudio(*args, data_dir=tmp_path / "data")

    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    assert "6 images" in payload["data"] and "28x28" in payload["data"]
    [variant] = payload["variants"]
    assert variant["error"] is None and variant["accuracy"]["data"] == "user"


def test_an_unreachable_database_is_named_without_its_password(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        OPTISTUDIO_DATA_DIR=str(tmp_path / "data"),
        OPTISTUDIO_DATABASE_URL="postgresql+psycopg://optistudio:s3cret@127.0.0.1:1/optistudio",
    )
    done = subprocess.run(
        [sys.executable, "-m", "optistudio.cli", "jobs"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 2, done.stderr
    assert "error: the database at postgresql+psycopg://optistudio:***@127.0.0.1:1/optistudio" in (
        done.stderr
    )
    assert "could not be reached" in done.stderr
    assert "OPTISTUDIO_DATABASE_URL" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_optimize_says_what_it_chose_for_int8_in_json_and_text(tiny_model: Path, tmp_path: Path):
    from optistudio.core.machine.environment import int8_choice

    args = partial(optimize_args, tiny_model, recipe="int8_dynamic", seconds="0.1")
    as_json = optistudio(*args(out=tmp_path / "a", as_json=True), data_dir=tmp_path / "d")
    as_text = optistudio(*args(out=tmp_path / "b"), data_dir=tmp_path / "d")

    sentence = int8_choice().sentence()  # this CPU's: 7-bit without VNNI/AMX, else 8-bit
    assert as_json.returncode == 0 and as_text.returncode == 0, as_json.stderr + as_text.stderr
    notes = json.loads(as_json.stdout)["notes"]
    [note] = [n for n in notes if "timed on one thread" not in n]  # that one only beside load
    assert note.startswith(sentence) and "int8_dynamic" in note
    assert f"note: {sentence}" in as_text.stdout
    assert any(  # the headline: the choice, or keep the original
        line.startswith(("Chosen: INT8 dynamic, ", "Keep the original: "))
        for line in as_text.stdout.splitlines()
    )
