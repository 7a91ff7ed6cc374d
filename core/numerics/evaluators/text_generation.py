"""Text generation: a decoder judged by how its next-token distributions follow the original's.

The judged output is the logits [N, T, V] of a decoder with a KV cache (its inputs name
past_key_values.N.key/value, optistudio.core.llm.decoder). At each of the T positions of each
sample, with p and q the softmax of the original's and the variant's logits:

    top1_agreement = share of positions where argmax q = argmax p   (default budget >= 0.9)
    mean_kl        = mean over positions of KL(p || q) = sum_v p(v) ln(p(v) / q(v)), in nats

Both read only what a run returns, whatever tokens it was fed. Perplexity needs the text's own
next tokens: given as the tally's labels (each sample's token ids [T], the ids it was fed, as
the decoder optimize run feeds windows of a text), the logits at position i predict id i+1
(T-1 predictions a sample) and, with nll the mean of -ln p(next id) over every prediction,

    perplexity           = exp(nll of the variant),   reference_perplexity = exp(nll of FP32)
    perplexity_increase  = perplexity / reference_perplexity - 1   (budget with the text: <= 5 %)

as optistudio.core.llm.perplexity defines them (Auto's rule for decoders, optistudio.core.llm.
choice, is on that increase). Without the text, the default budget is on top-1 agreement. The
drill-down lists the samples with the largest mean KL, each with both models' picks from the
first position where they part, side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.errors import DataMismatch
from optistudio.core.llm.choice import DEFAULT_PERPLEXITY_BUDGET
from optistudio.core.llm.decoder import PAST_NAME
from optistudio.core.llm.perplexity import kl_divergence, next_token_nll
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
    MetricInfo(
        name="perplexity_increase",
        label="Perplexity increase",
        higher_is_better=False,
        description="The variant's perplexity on the text over the original's, minus 1 "
        "(0.05 = 5 % higher).",
        needs_labels=True,
    ),
    MetricInfo(
        name="perplexity",
        label="Perplexity",
        higher_is_better=False,
        unit="value",
        description="exp of the variant's mean negative log-likelihood of the text's next tokens.",
        needs_labels=True,
    ),
    MetricInfo(
        name="reference_perplexity",
        label="Original's perplexity",
        higher_is_better=False,
        unit="value",
        description="The original's perplexity on the same text, in the same run.",
        needs_labels=True,
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
        """With `labels` (each sample's token ids, as fed) it measures perplexity too."""
        return TextGenerationTally(recognition.outputs[0], labels)

    def read_labels(self, path: Path, *, samples: int) -> Any:
        raise DataMismatch(
            "Text generation reads no labels file: perplexity is measured on the text the "
            "decoder is judged on.",
            hint="Give the text as the data instead (--calib text.txt, or token ids as .npy).",
        )


class TextGenerationTally(BaseTally):
    task = "text_generation"

    def __init__(self, output: str, texts: Sequence[np.ndarray] | None = None) -> None:
        super().__init__(texts)
        self.output = output
        self.positions = 0
        self.agreeing = 0
        self.kl_sum = 0.0
        self.predictions = 0
        self.nll = {"reference": 0.0, "candidate": 0.0}

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
        if self.labels is not None:
            self._add_text(ref, cand, self.labels_for(first_sample, ref.shape[0]))
        for row in range(ref.shape[0]):
            self.worst.offer(
                float(kl[row].mean()),
                lambda row=row: self._disagreement(
                    first_sample + row, ref[row], cand[row], kl[row]
                ),
            )
        self.samples += ref.shape[0]

    def _add_text(self, ref: np.ndarray, cand: np.ndarray, texts: Sequence[np.ndarray]) -> None:
        for row, ids in enumerate(texts):
            ids = np.asarray(ids, dtype=np.int64).reshape(-1)
            if len(ids) != ref.shape[1]:
                raise DataMismatch(
                    f"Sample {row} has {ref.shape[1]} positions of logits but {len(ids)} "
                    "token ids of text: the ids must be the ones it was fed."
                )
            self.nll["reference"] += float(next_token_nll(ref[row], ids).sum())
            self.nll["candidate"] += float(next_token_nll(cand[row], ids).sum())
            self.predictions += len(ids) - 1

    def score(self) -> TaskScore:
        metrics = {
            "top1_agreement": self.agreeing / max(self.positions, 1),
            "mean_kl": self.kl_sum / max(self.positions, 1),
        }
        if self.labels is None:
            note = f"{self.positions} positions; no text given, so no perplexity"
            return self.finished(metrics, note=note)
        metrics |= self._perplexities()
        note = f"{self.positions} positions; perplexity over {self.predictions} next tokens"
        return self.finished(metrics, note=note)

    def _perplexities(self) -> dict[str, float]:
        if self.predictions == 0:
            raise DataMismatch("Perplexity needs samples of at least 2 tokens; none had.")
        ref, cand = (float(np.exp(self.nll[k] / self.predictions)) for k in self.nll)
        return {
            "perplexity": cand,
            "reference_perplexity": ref,
            "perplexity_increase": cand / ref - 1,
        }

    @staticmethod
    def _disagreement(
        sample: int, ref: np.ndarray, cand: np.ndarray, kl: np.ndarray
    ) -> Disagreement:
        picks = ref.argmax(-1), cand.argmax(-1)
        parted = np.flatnonzero(picks[0] != picks[1])
        start = int(parted[0]) if parted.size else 0

        def tokens(chosen: np.ndarray) -> str:
            shown = " ".join(str(t) for t in chosen[start : start + SHOWN_TOKENS])
            return f"from position {start}: {shown}" if parted.size else shown

        return Disagreement(
            sample=sample,
            reference=tokens(picks[0]),
            candidate=tokens(picks[1]),
            severity=float(kl.mean()),
        )


TEXT_GENERATION = EvaluatorInfo(
    name="text_generation",
    label="Text generation",
    description="Judges a decoder language model (logits with a KV cache) by its next-token "
    "distributions against the original's: top-1 agreement and mean KL divergence, and on a "
    "text (the user's, or a built-in one) perplexity and its increase over the original's. "
    "The drill-down lists the samples whose distributions moved most, from where the two "
    "models' picks part.",
    metrics=METRICS,
    default_budget={"top1_agreement": 0.9},
    labels_budget={"perplexity_increase": DEFAULT_PERPLEXITY_BUDGET},
    implementation="optistudio.core.numerics.evaluators.text_generation:TextGenerationEvaluator",
    priority=15,
    input_kinds=("tokens",),
)
