"""The text_generation evaluator: recognition on a decoder, and its metrics' known answers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from decoder_models import build_tiny_decoder

from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.base import ModelFacts, OutputFacts, TaskScore
from optistudio.core.numerics.evaluators.recognize import model_facts
from optistudio.core.numerics.evaluators.text_generation import TEXT_GENERATION


@pytest.fixture(scope="module")
def evaluator():  # noqa: ANN201 - the Evaluator the info creates
    return TEXT_GENERATION.create()


def test_a_decoder_is_recognized_by_its_logits_and_cache(evaluator, tmp_path: Path) -> None:  # noqa: ANN001
    facts = model_facts(build_tiny_decoder(tmp_path))

    found = evaluator.recognize(facts)

    assert found is not None and found.outputs == ["logits"]
    assert "past_key_values.0.key" in found.reason and "4 in all" in found.reason


def test_logits_without_a_cache_are_not_a_decoder(evaluator, tmp_path: Path) -> None:  # noqa: ANN001
    facts = model_facts(build_tiny_decoder(tmp_path))
    facts.input_shapes = {"input_ids": ["batch", "sequence"]}

    assert evaluator.recognize(facts) is None


def _facts() -> ModelFacts:
    return ModelFacts(outputs=[OutputFacts(name="logits", dtype="float32", shape=["N", "T", 2])])


def _tally(evaluator, reference: np.ndarray, candidate: np.ndarray) -> TaskScore:  # noqa: ANN001
    recognition = evaluator.for_outputs(_facts(), ["logits"])
    tally = evaluator.tally(recognition)
    tally.add({"logits": reference}, {"logits": candidate}, first_sample=0)
    return tally.score()


def test_known_answers(evaluator) -> None:  # noqa: ANN001
    p, q = np.log([0.75, 0.25]), np.log([0.5, 0.5 + 1e-9])
    reference = np.array([[p, p], [p, [0.0, 5.0]]])  # 2 samples x 2 positions x 2 tokens
    candidate = np.array([[q, p], [p, [5.0, 0.0]]])  # q ties near 0.5, argmax 1; the last flips

    score = _tally(evaluator, reference, candidate)

    assert score.metrics["top1_agreement"] == pytest.approx(2 / 4)
    kl_q = 0.75 * np.log(0.75 / 0.5) + 0.25 * np.log(0.25 / 0.5)
    p5 = np.exp(5) / (1 + np.exp(5))
    kl_flip = p5 * np.log(p5 / (1 - p5)) + (1 - p5) * np.log((1 - p5) / p5)
    assert score.metrics["mean_kl"] == pytest.approx((kl_q + kl_flip) / 4, rel=1e-6)
    assert [w.sample for w in score.worst] == [1, 0]  # the flipped sample moved most


def test_identical_outputs_agree_fully(evaluator) -> None:  # noqa: ANN001
    logits = np.random.default_rng(0).standard_normal((3, 5, 16))

    score = _tally(evaluator, logits, logits.copy())

    assert score.metrics == {"top1_agreement": 1.0, "mean_kl": pytest.approx(0, abs=1e-12)}
    assert score.samples == 3 and score.worst == []


def test_the_text_as_labels_gives_perplexity_known_answers(evaluator) -> None:  # noqa: ANN001
    sure, flat = np.array([0.0, 50.0]), np.zeros(2)  # next token 1 for sure; a coin toss
    text = [np.array([0, 1, 1])]  # positions 0 and 1 predict ids 1 and 1
    recognition = evaluator.for_outputs(_facts(), ["logits"])
    tally = evaluator.tally(recognition, labels=text)

    tally.add(
        {"logits": np.array([[sure, sure, flat]])},
        {"logits": np.array([[sure, flat, flat]])},
        first_sample=0,
    )
    score = tally.score()

    assert score.metrics["reference_perplexity"] == pytest.approx(1.0)
    assert score.metrics["perplexity"] == pytest.approx(np.sqrt(2))  # exp((0 + ln 2) / 2)
    assert score.metrics["perplexity_increase"] == pytest.approx(np.sqrt(2) - 1)
    assert score.worst[0].reference.startswith("from position 1:")


def test_text_ids_must_be_the_ones_fed(evaluator) -> None:  # noqa: ANN001
    recognition = evaluator.for_outputs(_facts(), ["logits"])
    tally = evaluator.tally(recognition, labels=[np.array([0, 1])])
    logits = np.zeros((1, 3, 2))

    with pytest.raises(DataMismatch, match="must be the ones it was fed"):
        tally.add({"logits": logits}, {"logits": logits}, first_sample=0)


def test_the_default_budget_with_a_text_is_on_perplexity() -> None:
    assert TEXT_GENERATION.labels_budget == {"perplexity_increase": 0.05}
