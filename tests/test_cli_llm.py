"""`optistudio bench` on a decoder (optistudio/cli/llm.py): one JSON document, or None for others;
`optistudio llm serve-whatif`: its --json document."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import onnx
import pytest
from decoder_models import build_tiny_decoder

from optistudio.cli import build_parser, main
from optistudio.cli.llm import command_llm, decoder_bench


def _args(model: Path, *, as_json: bool) -> argparse.Namespace:
    return argparse.Namespace(model=model, batch=[1, 2], threads=1, backend=None, json=as_json)


def test_a_decoder_gets_ttft_and_decoding_speed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_tiny_decoder(tmp_path, config="hf")

    code = decoder_bench(_args(model, as_json=True))

    document = json.loads(capsys.readouterr().out)
    assert code == 0
    # 512 tokens do not fit the tiny model's context of 128
    assert [p["prompt_tokens"] for p in document["prefill"]] == [32, 128]
    assert [d["batch"] for d in document["decode"]] == [1, 2]


def test_another_model_is_left_to_the_ordinary_bench(tmp_path: Path) -> None:
    model = onnx.load(str(build_tiny_decoder(tmp_path)))
    kept = [output for output in model.graph.output if output.name == "logits"]
    model.graph.ClearField("output")
    model.graph.output.extend(kept)
    onnx.save(model, tmp_path / "no_cache.onnx")

    assert decoder_bench(_args(tmp_path / "no_cache.onnx", as_json=True)) is None


def test_the_table_names_what_it_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    decoder_bench(_args(build_tiny_decoder(tmp_path), as_json=False))

    out = capsys.readouterr().out
    assert "on onnxruntime (1 threads)" in out
    assert "TTFT, 32-token prompt, batch 1:" in out and "decoding, batch 2, 64 steps" in out


def test_serve_whatif_predicts_and_verifies_in_one_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_tiny_decoder(tmp_path)
    args = build_parser().parse_args(
        ["llm", "serve-whatif", str(model), "--rate", "20", "--prompt-tokens", "12"]
        + ["--new-tokens", "6", "--max-batch", "3", "--steps", "4", "--requests", "50"]
        + ["--verify", "8", "--json"]
    )

    code = command_llm(args)

    document = json.loads(capsys.readouterr().out)
    assert code == 0
    assert document["profile"]["batch_sizes"] == [1, 2, 3]
    assert document["profile"]["prompt_lengths"] == [3, 12]
    assert [d["batch"] for d in document["decode"]] == [1, 2, 3]
    whatif = document["whatif"]
    assert whatif["offered_tokens_per_s"] == 20 * 6
    assert whatif["policy"] == {"batching": "continuous", "max_batch": 3, "timeout_ms": 0.0}
    assert whatif["predicted"]["tokens_per_s"] > 0 and not whatif["predicted"]["saturated"]
    assert document["verified"]["measured"]["requests"] == 8  # int(8 x 0.1): none skipped
    assert document["environment"]["backend"] == "onnxruntime"


def test_serve_whatif_refuses_what_the_context_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = build_tiny_decoder(tmp_path)

    code = main(["llm", "serve-whatif", str(model), "--rate", "5", "--new-tokens", "200", "--json"])

    assert code == 2
    assert "needs 232 tokens of context but the model holds 128" in capsys.readouterr().out


def test_a_decoders_folder_is_benched_as_its_graph(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build_tiny_decoder(tmp_path / "decoder")

    code = decoder_bench(_args(tmp_path / "decoder", as_json=True))

    assert code == 0 and json.loads(capsys.readouterr().out)["decode"]


def test_convert_says_what_the_checkpoint_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["Qwen2ForCausalLM"]}))
    (folder / "model.safetensors").write_bytes(b"\0")

    code = main(["llm", "convert", str(folder), "--out", str(tmp_path / "out"), "--json"])

    error = json.loads(capsys.readouterr().out)["error"]
    assert code == 2 and "has no tokenizer" in error["message"]
