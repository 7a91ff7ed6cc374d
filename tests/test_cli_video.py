"""`optistudio video`: one JSON document with per-stream figures, totals, decoder and speedup;
expected failures are exit 2 with the error document."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from diagnostic_models import build_cnn

from optistudio.cli import main
from optistudio.core.video.clips import make_clip


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("cli-video")
    return {
        "cnn": build_cnn(tmp / "cnn.onnx"),
        "clip": make_clip(tmp / "clip.mp4", seconds=1, size=(72, 96)),
    }


def video(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["video", *args, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_video_json_has_each_stream_totals_decoder_and_speedup(files, capsys) -> None:  # type: ignore[no-untyped-def]
    code, payload = video(
        capsys, str(files["cnn"]), "--source", str(files["clip"]), "--streams", "3",
        "--seconds", "0.5", "--realtime", "--max-batch-size", "4",
    )  # fmt: skip

    assert code == 0
    assert [s["stream"] for s in payload["streams"]] == [0, 1, 2]
    assert {"fps", "p50_ms", "p99_ms", "dropped"} <= set(payload["streams"][0])
    assert len({s["offset_s"] for s in payload["streams"]}) == 3  # each from its own offset
    assert payload["decoder"] == "h264" and payload["pacing"] == "realtime"
    assert payload["decoding"] == "software" and payload["detector"] is None
    assert "boxes_per_frame" not in payload["streams"][0]  # a classifier: no boxes
    assert payload["totals"]["p50_ms"] <= payload["totals"]["p99_ms"]
    assert payload["totals"]["frames"] == sum(s["frames"] for s in payload["streams"])
    assert payload["speedup"] == pytest.approx(
        payload["totals"]["fps"] / payload["per_frame"]["fps"]
    )
    assert payload["settings"]["max_batch_size"] == 4


def test_without_a_source_a_generated_clip_plays(files, capsys) -> None:  # type: ignore[no-untyped-def]
    code, payload = video(capsys, str(files["cnn"]), "--seconds", "0.3", "--no-baseline")

    assert code == 0 and payload["streams"][0]["source"] == "generated.mp4"
    assert payload["streams"][0]["frames"] > 0


def test_shape_sets_the_frame_size(files, capsys) -> None:  # type: ignore[no-untyped-def]
    code, payload = video(
        capsys, str(files["cnn"]), "--source", str(files["clip"]), "--seconds", "0.2",
        "--shape", "x=1,3,16,16", "--no-baseline",
    )  # fmt: skip

    assert code == 0 and payload["input_shape"] == [1, 3, 16, 16]
    assert payload["speedup"] is None and payload["per_frame"] is None


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--source", "{tmp}/gone.mp4"], "data_mismatch", "does not exist"),
        (["--source", "{clip}", "--color", "GRAY"], "data_mismatch", "channel"),
        (["--source", "{clip}", "--streams", "0"], "invalid_spec", "streams"),
        (["--source", "{clip}", "--shape", "x=1,3"], "invalid_spec", "4 dims"),
    ],
    ids=["missing-file", "wrong-channels", "no-streams", "bad-shape"],
)
def test_expected_failures_are_exit_2_with_one_error_document(
    files, capsys, tmp_path: Path, args: list[str], code: str, words: str
) -> None:  # type: ignore[no-untyped-def]
    filled = [a.format(tmp=tmp_path, clip=files["clip"]) for a in args]

    exit_code, payload = video(capsys, str(files["cnn"]), *filled, "--seconds", "0.2")

    assert exit_code == 2
    assert payload["error"]["code"] == code and words in payload["error"]["message"]
    assert str(tmp_path) not in payload["error"]["message"]
