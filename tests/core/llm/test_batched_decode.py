"""Sequences of different lengths decoded in one batch give the tokens each gives alone."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from decoder_models import TinyShape, build_tiny_decoder

from optistudio.core.errors import InvalidSpec
from optistudio.core.llm import greedy, open_decoder
from optistudio.core.llm.batched_decode import (
    BatchedDecoder,
    greedy_batched,
    left_padded,
    positions_of,
)
from optistudio.core.llm.batched_serving import DecodeRequest, ServingPolicy, serve
from optistudio.core.llm.decode import DecoderSession

SHAPE = TinyShape()
RNG = np.random.default_rng(1)
PROMPTS = [RNG.integers(4, SHAPE.vocab, n) for n in (3, 7, 5, 12, 1, 9)]
NEW_TOKENS = [6, 4, 9, 5, 7, 1]


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_decoder(tmp_path_factory.mktemp("tiny") / "fp32", SHAPE)


def _alone(session: DecoderSession, prompt: np.ndarray, new_tokens: int) -> list[int]:
    return greedy(session, prompt[None], new_tokens).tokens[0].tolist()


def test_left_padding_puts_each_prompt_at_the_right_end() -> None:
    ids, mask = left_padded([np.array([7, 8, 9]), np.array([5])])

    assert ids.tolist() == [[7, 8, 9], [0, 0, 5]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert positions_of(mask).tolist() == [[0, 1, 2], [0, 0, 0]]


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_static_batching_gives_each_sequence_its_own_tokens(
    tiny_decoder: Path, backend: str
) -> None:
    session = open_decoder(tiny_decoder, backend=backend)

    batched = greedy_batched(session, PROMPTS, NEW_TOKENS)

    expected = [_alone(session, p, n) for p, n in zip(PROMPTS, NEW_TOKENS, strict=True)]
    assert [tokens.tolist() for tokens in batched] == expected


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_rows_joining_and_leaving_between_steps_keep_their_tokens(
    tiny_decoder: Path, backend: str
) -> None:
    session = open_decoder(tiny_decoder, backend=backend)
    batch = BatchedDecoder(session)
    short, long, shorter = PROMPTS[0], PROMPTS[3], np.array([11, 2])
    chosen: list[list[int]] = [[int(batch.admit([short])[0])]]

    for _ in range(4):  # the cache is 3 + 4 = 7 long; the next prompt is longer (12)
        chosen[0].append(int(batch.step()[0]))
    chosen.append([int(batch.admit([long])[0])])
    for _ in range(3):
        for row, token in enumerate(batch.step()):
            chosen[row].append(int(token))
    chosen.append([int(batch.admit([shorter])[0])])  # shorter than the cache: padded itself
    batch.retire([1])  # the longest leaves: the columns only it saw are cut
    assert batch.length == len(short) + 4 + 3
    for _ in range(4):
        for row, token in zip((0, 2), batch.step(), strict=True):
            chosen[row].append(int(token))

    assert chosen[0] == _alone(session, short, 12)
    assert chosen[1] == _alone(session, long, 4)
    assert chosen[2] == _alone(session, shorter, 5)


def test_continuous_batching_refills_a_finished_place(tiny_decoder: Path) -> None:
    session = open_decoder(tiny_decoder)
    requests = [
        DecodeRequest(arrival_s=0.0, prompt_tokens=len(p), new_tokens=n, prompt=p)
        for p, n in zip(PROMPTS, NEW_TOKENS, strict=True)
    ]

    run = serve(session, requests, ServingPolicy(batching="continuous", max_batch=2), vocab=64)

    expected = [_alone(session, p, n) for p, n in zip(PROMPTS, NEW_TOKENS, strict=True)]
    assert [r.tokens for r in run.requests] == expected
    assert max(run.step_rows) == 2
    # six requests, two places: later ones were admitted only once earlier ones finished
    admitted = [r.admitted_s for r in run.requests]
    assert admitted[2] >= run.requests[1].token_s[-1]


def test_a_decoder_without_position_ids_refuses_padding(tiny_decoder: Path) -> None:
    session = open_decoder(tiny_decoder)
    unpositioned = DecoderSession(
        session.loaded, session.io.model_copy(update={"position_ids": None})
    )

    with pytest.raises(InvalidSpec, match="no position_ids input"):
        BatchedDecoder(unpositioned).admit([np.array([5, 6, 7]), np.array([8])])


def test_each_sequence_needs_a_new_token(tiny_decoder: Path) -> None:
    session = open_decoder(tiny_decoder)

    with pytest.raises(InvalidSpec, match="at least one new token"):
        greedy_batched(session, PROMPTS[:2], [3, 0])
