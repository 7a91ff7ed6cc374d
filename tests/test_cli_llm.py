"""`optistudio bench` on a decoder (optistudio/cli/llm.py): one JSON document, or None for others."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import onnx
import pytest
from decoder_models import build_tiny_decoder

from optistudio.cli.llm import decoder_bench


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
