"""Greedy decoding with the cache carried between steps, on our backends, against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from decoder_models import (
    TinyShape,
    build_tiny_decoder,
    reference_greedy,
    reference_logits,
    tiny_weights,
)

from optistudio.core.errors import InvalidSpec
from optistudio.core.llm import greedy, open_decoder
from optistudio.core.llm.serving import DecoderBenchSettings, benchmark_decoder
from optistudio.core.llm.timing import time_decode, time_prefill

SHAPE = TinyShape()
WEIGHTS = tiny_weights(SHAPE)


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_decoder(tmp_path_factory.mktemp("tiny") / "fp32", SHAPE)


PROMPTS = np.array([[5, 9, 17, 3, 40], [11, 2, 63, 8, 30]])


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_greedy_decoding_equals_the_reference_tokens(tiny_decoder: Path, backend: str) -> None:
    session = open_decoder(tiny_decoder, backend=backend)

    generation = greedy(session, PROMPTS, 12)

    expected = [reference_greedy(WEIGHTS, SHAPE, prompt, 12) for prompt in PROMPTS]
    assert generation.tokens.tolist() == expected
    assert len(generation.step_s) == 11


def test_a_cached_step_equals_the_whole_sequence(tiny_decoder: Path) -> None:
    session = open_decoder(tiny_decoder)
    ids = np.arange(4, 24)[None]

    _, cache = session.step(ids[:, :15], session.empty_cache(1))
    logits, cache = session.step(ids[:, 15:], cache)

    assert cache.length == 20
    np.testing.assert_allclose(
        logits[0], reference_logits(WEIGHTS, SHAPE, ids[0])[15:], rtol=1e-4, atol=1e-4
    )


def test_a_prompt_must_hold_a_token(tiny_decoder: Path) -> None:
    session = open_decoder(tiny_decoder)

    with pytest.raises(InvalidSpec, match="at least one token"):
        greedy(session, np.zeros((1, 0), dtype=np.int64), 4)


def test_an_ir_variant_needs_the_interface_of_its_original(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match="not an ONNX file"):
        open_decoder(tmp_path / "model.xml", backend="openvino")


def test_the_timings_are_read_from_the_steps(tiny_decoder: Path) -> None:
    session = open_decoder(tiny_decoder)

    prefill = time_prefill(session, 32, SHAPE.vocab, repeats=2)
    decode = time_decode(session, SHAPE.vocab, batch=2, steps=8)

    assert prefill.prompt_tokens == 32 and prefill.ttft_ms > 0
    assert decode.steps == 8 and decode.batch == 2
    assert decode.ms_per_token_p50 <= decode.ms_per_token_p99
    assert decode.tokens_per_s > 0


def test_a_decoder_benchmark_names_what_it_measured(tiny_decoder: Path) -> None:
    settings = DecoderBenchSettings(prompt_lengths=[8, 32], batches=[1, 2], steps=4, repeats=1)

    report = benchmark_decoder(tiny_decoder, settings=settings)

    assert [p.prompt_tokens for p in report.prefill] == [8, 32]
    assert [d.batch for d in report.decode] == [1, 2]
    assert report.size_bytes == tiny_decoder.stat().st_size
    assert "isa_flags" in report.environment and report.environment["backend"] == "onnxruntime"


def test_a_benchmark_longer_than_the_context_is_refused(tiny_decoder: Path) -> None:
    settings = DecoderBenchSettings(prompt_lengths=[512])

    with pytest.raises(InvalidSpec, match="needs 512 tokens of context but the model holds 128"):
        benchmark_decoder(tiny_decoder, settings=settings)
