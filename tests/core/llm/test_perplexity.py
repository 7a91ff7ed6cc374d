"""Perplexity, top-1 agreement and mean KL: known answers, and ONNX Runtime against numpy."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from decoder_models import TinyShape, build_tiny_decoder, reference_logits, tiny_weights

from optistudio.core.errors import DataMismatch
from optistudio.core.llm import open_decoder
from optistudio.core.llm.perplexity import (
    agreement,
    kl_divergence,
    next_token_nll,
    perplexity,
    windows,
)

SHAPE = TinyShape()
WEIGHTS = tiny_weights(SHAPE)


@pytest.fixture(scope="module")
def tiny_decoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_decoder(tmp_path_factory.mktemp("tiny") / "fp32", SHAPE)


def test_flat_logits_give_the_vocabulary_size_as_perplexity() -> None:
    ids = np.array([3, 1, 4, 1, 5])

    nll = next_token_nll(np.zeros((5, 50)), ids)

    assert np.exp(nll.mean()) == pytest.approx(50)


def test_a_sure_right_guess_has_perplexity_one() -> None:
    ids = np.array([0, 1, 2, 3])
    logits = np.full((4, 8), -100.0)
    logits[np.arange(3), ids[1:]] = 100.0

    assert np.exp(next_token_nll(logits, ids).mean()) == pytest.approx(1.0)


def test_kl_of_two_known_distributions() -> None:
    p, q = np.array([0.75, 0.25]), np.array([0.5, 0.5])
    expected = 0.75 * np.log(0.75 / 0.5) + 0.25 * np.log(0.25 / 0.5)

    kl = kl_divergence(np.log(p)[None], np.log(q)[None])

    assert kl[0] == pytest.approx(expected)
    assert kl_divergence(np.log(p)[None], np.log(p)[None] + 3.0)[0] == pytest.approx(0, abs=1e-12)


def test_windows_cut_the_text_and_drop_a_lone_last_token() -> None:
    chunks = list(windows(np.arange(11), 5))

    assert [len(c) for c in chunks] == [5, 5]


@pytest.mark.parametrize(
    "ids",
    [np.zeros((2, 4), dtype=np.int64), np.array([0.5, 1.5]), np.array([7])],
    ids=["two-rows", "floats", "one-token"],
)
def test_what_is_not_a_text_is_refused(ids: np.ndarray) -> None:
    with pytest.raises(DataMismatch):
        list(windows(ids, 8))


def test_perplexity_on_onnx_runtime_equals_numpy_within_one_percent(tiny_decoder: Path) -> None:
    ids = np.random.default_rng(1).integers(0, SHAPE.vocab, 130)
    expected_nll = np.concatenate(
        [next_token_nll(reference_logits(WEIGHTS, SHAPE, c), c) for c in windows(ids, 64)]
    )

    score = perplexity(open_decoder(tiny_decoder), ids, window=64)

    assert score.perplexity == pytest.approx(np.exp(expected_nll.mean()), rel=0.01)
    assert (score.windows, score.predictions) == (3, 63 + 63 + 1)


def test_a_model_agrees_with_itself(tiny_decoder: Path) -> None:
    session = open_decoder(tiny_decoder)
    ids = np.random.default_rng(2).integers(0, SHAPE.vocab, 65)

    result = agreement(session, session, ids, window=65)

    assert result.top1_agreement == 1.0
    assert result.perplexity_increase == pytest.approx(0, abs=1e-12)
    assert result.mean_kl == pytest.approx(0, abs=1e-9)
