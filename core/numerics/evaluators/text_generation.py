"""Text generation: a decoder judged by how its next-token distributions follow the original's.

The judged output is the logits [N, T, V] of a decoder with a KV cache (its inputs name
past_key_values.N.key/value, optistudio.core.llm.decoder). At each of the T positions of each
sample, with p and q the softmax of the original's and the variant's logits:

    top1_agreement = share of positions where argmax q = argmax p   (default budget >= 0.9)
    mean_kl        = mean over positions of KL(p || q) = sum_v p(v) ln(p(v) / q(v)), in nats

Both read only what a run returns, whatever tokens it was fed. Perplexity needs the text's own
next tokens, which a tally never sees: it is measured on a text by
optistudio.core.llm.perplexity (the decoder Auto's budget is on its increase,
optistudio.core.llm.choice). The drill-down lists the samples with the largest mean KL, each with
the first tokens both models would pick.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.decoder import PAST_NAME
from optistudio.core.llm.perplexity import kl_divergence
from optistudio.core.numerics.evaluators.base import (
    Disagreement,
    EvaluatorInfo,
    MetricInfo,
    ModelFacts,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.outputs import (
    OneOutputEvaluator,
    is_float,
    shape_text,
    size,
)
from optistudio.core.numerics.evaluators.tallying import BaseTally, check_rank, pair

SHOWN_TOKENS = 8
"""Tokens of each reading a drill-down row shows."""

METRICS = [
    MetricInfo(
        name="top1_agreement",
        label="Next-token top-1 agreement",
        higher_is_better=True,
        description="Share of positions where the variant's most likely next token is the "
        "original's.",
    ),
    MetricInfo(
        name="mean_kl",
        label="Mean KL of next-token distributions",
        higher_is_better=False,
        unit="value",
        description="KL(original || variant) of the next-token distributions, in nats, "
        "averaged over positions.",
    ),
]


def _logits(facts: ModelFacts) -> OutputFacts | None:
    for output in facts.outputs:
        vocab = size(output.shape[-1]) if output.shape else None
        if is_float(output) and len(output.shape) == 3 and (vocab or 0) >= 2:
            return output
    return None


def _why_not(output: OutputFacts) -> str | None:
    if is_float(output) and len(output.shape) == 3:
        return None
    return "a decoder's logits are floats [N, T, vocabulary]"


class TextGenerationEvaluator(OneOutputEvaluator):
    """Top-1 agreement and mean KL of the next-token distributions."""

    why_not = staticmethod(_why_not)

    def recognize(self, facts: ModelFacts) -> Recognition | None:
        cache = sorted(name for name in facts.input_shapes if PAST_NAME.match(name))
        logits = _logits(facts)
        if not cache or logits is None:
            return None
        return Recognition(
            task=self.info.name,
            reason=f"{logits.name} {shape_text(logits.shape, 'NTV')} with KV-cache inputs "
            f"({cache[0]}, ... {len(cache)} in all): a decoder language model",
            outputs=[logits.name],
        )

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        if labels is not None:
            raise InvalidSpec(
                "Text generation is judged against the original's next-token distributions; "
                "it takes no labels.",
                hint="Leave the labels out; perplexity on a text comes from optistudio.core.llm.",
            )
        return TextGenerationTally(recognition.outputs[0])


class TextGenerationTally(BaseTally):
    task = "text_generation"

    def __init__(self, output: str) -> None:
        super().__init__(None)
        self.output = output
        self.positions = 0
        self.agreeing = 0
        self.kl_sum = 0.0

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        ref, cand = pair(reference, candidate, self.output)
        check_rank(ref, self.output, 3)
        same = ref.argmax(-1) == cand.argmax(-1)
        kl = kl_divergence(ref, cand)
        self.positions += int(same.size)
        self.agreeing += int(same.sum())
        self.kl_sum += float(kl.sum())
        for row in range(ref.shape[0]):
            self.worst.offer(
                float(kl[row].mean()),
                lambda row=row: self._disagreement(
                    first_sample + row, ref[row], cand[row], kl[row]
                ),
            )
        self.samples += ref.shape[0]

    def score(self) -> TaskScore:
        metrics = {
            "top1_agreement": self.agreeing / max(self.positions, 1),
            "mean_kl": self.kl_sum / max(self.positions, 1),
        }
        note = f"{self.positions} positions; perplexity is measured on a text (core.llm)"
        return self.finished(metrics, note=note)

    @staticmethod
    def _disagreement(
        sample: int, ref: np.ndarray, cand: np.ndarray, kl: np.ndarray
    ) -> Disagreement:
        def tokens(logits: np.ndarray) -> str:
            return " ".join(str(t) for t in logits.argmax(-1)[:SHOWN_TOKENS])

        return Disagreement(
            sample=sample,
            reference=tokens(ref),
            candidate=tokens(cand),
            severity=float(kl.mean()),
        )


TEXT_GENERATION = EvaluatorInfo(
    name="text_generation",
    label="Text generation",
    description="Judges a decoder language model (logits with a KV cache) by its next-token "
    "distributions against the original's: top-1 agreement and mean KL divergence. Perplexity "
    "on a text, and its increase, come from optistudio.core.llm. The drill-down lists the "
    "samples whose distributions moved most.",
    metrics=METRICS,
    default_budget={"top1_agreement": 0.9},
    implementation="optistudio.core.numerics.evaluators.text_generation:TextGenerationEvaluator",
    priority=15,
    input_kinds=("tokens",),
)
