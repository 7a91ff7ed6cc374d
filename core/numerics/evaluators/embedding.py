"""Embeddings: a variant judged by its vectors' directions and the neighbours they retrieve.

The judged output holds vectors [N, D] made by pooling or normalization (ReduceMean,
GlobalAveragePool, LpNormalization, a division by the norm...) or named like '*embedding*'.
Weighed as evidence (`evidence`): a vector per sample is WEAK, pooling or normalization MODERATE,
the name MODERATE; a Softmax or a Sigmoid (also one written in primitive ops) is MODERATE
evidence against: those are scores per class, not a direction.
With r_i and c_i the original's and the variant's vectors of sample i:

    cosine_i    = r_i . c_i / (|r_i| |c_i|)     (1 when both are zero, 0 when only one is)
    mean_cosine = mean_i cosine_i,   min_cosine = min_i cosine_i

and retrieval, the question an embedding is used for: let R_k(i) be sample i's k nearest other
samples by cosine among the original's vectors, C_k(i) the same among the variant's; then

    recall_at_10 = mean_i |R_k(i) ∩ C_k(i) ∪ T(i)| / k,   k = min(10, samples - 1)

the fraction of the original's neighbours the variant still retrieves (default budget:
>= 0.98). T(i) are the near-ties: neighbours in R_k(i) whose original similarity to i exceeds
that of the original's (k+1)-th neighbour by less than TIE_MARGIN (0.05). Which of two such
samples is 10th and which 11th was noise in the original already (on a small set, unrelated
sentences at ranks 7-11 sit within a few hundredths of each other), so a variant that swaps
them has lost nothing a search would show; a neighbour that stood clear of the boundary and is
gone is lost. With fewer than 11 samples k is smaller and the note says which k; with one sample
there are no neighbours and the metric is not reported. Retrieval keeps both sets of vectors,
for the first 20000 samples only (the note says so when there were more); similarities are
taken in blocks of rows, so memory is the vectors plus one block. Embeddings have no labels
mode. The drill-down lists the samples with the lowest cosine, with each side's nearest
neighbours when retrieval was measured.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from optistudio.core.errors import DataMismatch
from optistudio.core.numerics.evaluators.base import (
    Case,
    Disagreement,
    EvaluatorInfo,
    MetricInfo,
    OutputFacts,
    Recognition,
    TaskScore,
    TaskTally,
)
from optistudio.core.numerics.evaluators.evidence import MODERATE, WEAK, Evidence
from optistudio.core.numerics.evaluators.outputs import (
    WeighedEvaluator,
    made_by,
    named_like,
    output_role,
    shape_text,
    size,
)
from optistudio.core.numerics.evaluators.tallying import BaseTally, check_rank, pair

RECALL_K = 10
TIE_MARGIN = 0.05
"""Cosine by which a neighbour must stand above the original's (k+1)-th to count if lost."""
KEPT_FOR_RETRIEVAL = 20000
BLOCK_ROWS = 1024
SHOWN_NEIGHBOURS = 5
SAME_DIRECTION = 1e-12
CLASS_SCORES = frozenset({"Softmax", "LogSoftmax", "Sigmoid"})

METRICS = [
    MetricInfo(
        name="recall_at_10",
        label="Recall@10 of the original's neighbours",
        higher_is_better=True,
        description="For each sample, the fraction of its 10 nearest neighbours (by the "
        "original's vectors) that the variant's vectors retrieve too, averaged.",
    ),
    MetricInfo(
        name="mean_cosine",
        label="Mean cosine",
        higher_is_better=True,
        unit="value",
        description="Cosine of each sample's variant vector with its original vector, averaged.",
    ),
    MetricInfo(
        name="min_cosine",
        label="Min cosine",
        higher_is_better=True,
        unit="value",
        description="The worst sample's cosine of its variant vector with its original vector.",
    ),
]


def _why_not(output: OutputFacts) -> str | None:
    return None if len(output.shape) == 2 else "embeddings are [N, D]"


def _embedding_case(task: str, output: OutputFacts) -> Case | None:
    """The case for `output` as embeddings (module docstring); None for what is not a vector
    per sample, or a vector nothing else speaks for."""
    if len(output.shape) != 2 or size(output.shape[1]) == 1:
        return None  # one value per sample is a score, not a vector
    shape = shape_text(output.shape, "ND")
    evidence = [Evidence(kind="structure", weight=WEAK, text=f"{output.name} {shape}: a vector")]
    named = named_like(output, "embed")
    if named:
        evidence.append(Evidence(kind="name", weight=MODERATE, text="named as an embedding"))
    if output_role(output) == "embedding":
        made = f"made by {made_by(output)} (pooling or normalization)"
        evidence.append(Evidence(kind="structure", weight=MODERATE, text=made))
    elif output.producer in CLASS_SCORES:
        against = f"after {made_by(output)}: scores per class, not a direction"
        evidence.append(Evidence(kind="structure", weight=-MODERATE, text=against))
    if len(evidence) == 1:
        return None
    why = "named as an embedding" if named else f"made by {made_by(output)}"
    if not named and output_role(output) == "embedding":
        why += " (pooling or normalization)"
    reason = f"{output.name} {shape} {why}: an embedding"
    return Case(
        recognition=Recognition(task=task, reason=reason, outputs=[output.name]),
        evidence=evidence,
    )


class EmbeddingEvaluator(WeighedEvaluator):
    """Cosine of each vector and recall of the original's nearest neighbours."""

    why_not = staticmethod(_why_not)
    case = staticmethod(_embedding_case)

    def tally(self, recognition: Recognition, labels: Any | None = None) -> TaskTally:
        if labels is not None:
            raise _no_labels()
        return EmbeddingTally(recognition.outputs[0])

    def read_labels(self, path: Path, *, samples: int) -> Any:
        """Embeddings are judged against the original's vectors only."""
        raise _no_labels()


def _no_labels() -> DataMismatch:
    return DataMismatch(
        "Embeddings are judged against the original model's vectors; labels are not used.",
        hint="Leave the labels out for this model.",
    )


def cosines(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per row: the cosine of the two vectors (1 when both are zero, 0 when only one is or
    when the variant's row is not finite)."""
    ref, cand = reference.astype(np.float64), candidate.astype(np.float64)
    broken = ~np.isfinite(cand).all(axis=1)
    cand = np.where(np.isfinite(cand), cand, 0.0)
    ref_norm, cand_norm = np.linalg.norm(ref, axis=1), np.linalg.norm(cand, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.clip(np.einsum("ij,ij->i", ref, cand) / (ref_norm * cand_norm), -1.0, 1.0)
    values = np.where((ref_norm == 0) & (cand_norm == 0), 1.0, values)
    values = np.where((ref_norm == 0) ^ (cand_norm == 0), 0.0, values)
    return np.where(broken, 0.0, values)


def nearest(vectors: np.ndarray, k: int, rows: np.ndarray | None = None) -> np.ndarray:
    """The k nearest other rows of each of `rows` (all when None) by cosine: [len(rows), k],
    nearest first. Similarities are taken BLOCK_ROWS rows at a time."""
    unit = _unit(vectors)
    rows = np.arange(len(unit)) if rows is None else rows
    found = np.empty((len(rows), k), dtype=np.int64)
    for start in range(0, len(rows), BLOCK_ROWS):
        block = rows[start : start + BLOCK_ROWS]
        similarity = unit[block] @ unit.T
        similarity[np.arange(len(block)), block] = -np.inf  # not its own neighbour
        top = np.argpartition(-similarity, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(similarity, top, axis=1), axis=1, kind="stable")
        found[start : start + len(block)] = np.take_along_axis(top, order, axis=1)
    return found


def _unit(vectors: np.ndarray) -> np.ndarray:
    values = np.nan_to_num(vectors.astype(np.float32), nan=0.0, posinf=0.0, neginf=0.0)
    norms = np.linalg.norm(values, axis=1, keepdims=True)
    return values / np.where(norms > 0, norms, 1.0)


def neighbour_recall(reference: np.ndarray, candidate: np.ndarray, k: int) -> np.ndarray:
    """Per sample: the share of the original's k nearest that the variant retrieves, near-ties
    at the boundary counted as retrieved (see the module docstring)."""
    lost = lost_neighbours(reference, candidate, k)
    return np.array([1.0 - len(gone) / k for gone in lost])


def lost_neighbours(
    reference: np.ndarray, candidate: np.ndarray, k: int, rows: np.ndarray | None = None
) -> list[list[int]]:
    """Per sample (of `rows`, all when None): the original's k nearest that the variant does
    not retrieve and that stood clear of the boundary by TIE_MARGIN, nearest first."""
    rows = np.arange(len(reference)) if rows is None else rows
    beyond = min(k + 1, len(reference) - 1)
    ref_near = nearest(reference, beyond, rows)
    cand_near = nearest(candidate, k, rows)
    unit = _unit(reference)
    lost = []
    for row, near, found in zip(rows.tolist(), ref_near.tolist(), cand_near.tolist(), strict=True):
        similarity = unit[near] @ unit[row]
        boundary = float(similarity[k]) if beyond > k else -np.inf
        retrieved = set(found)
        lost.append(
            [
                j
                for j, sim in zip(near[:k], similarity[:k].tolist(), strict=True)
                if j not in retrieved and sim - boundary >= TIE_MARGIN
            ]
        )
    return lost


class EmbeddingTally(BaseTally):
    """Cosine sums; both models' vectors for the first KEPT_FOR_RETRIEVAL samples."""

    task = "embedding"

    def __init__(self, output: str, kept: int = KEPT_FOR_RETRIEVAL) -> None:
        super().__init__(None)
        self.output = output
        self.kept = kept
        self.cosine_sum = 0.0
        self.cosine_min = 1.0
        self.vectors: dict[str, list[np.ndarray]] = {"reference": [], "candidate": []}

    def add(
        self,
        reference: dict[str, np.ndarray],
        candidate: dict[str, np.ndarray],
        *,
        first_sample: int,
    ) -> None:
        ref, cand = pair(reference, candidate, self.output)
        check_rank(ref, self.output, 2)
        values = cosines(ref, cand)
        self.cosine_sum += float(values.sum())
        self.cosine_min = min(self.cosine_min, float(values.min(initial=1.0)))
        room = max(self.kept - sum(len(part) for part in self.vectors["reference"]), 0)
        if room:
            self.vectors["reference"].append(ref[:room].astype(np.float32))
            self.vectors["candidate"].append(cand[:room].astype(np.float32))
        for row, cosine in enumerate(values.tolist()):
            self.worst.offer(_distance(cosine), partial(_low_cosine, first_sample + row, cosine))
        self.samples += len(ref)

    def score(self) -> TaskScore:
        if self.samples == 0:
            return self.finished({})
        metrics = {
            "mean_cosine": self.cosine_sum / self.samples,
            "min_cosine": self.cosine_min,
        }
        kept = {side: _stacked(parts) for side, parts in self.vectors.items()}
        k = min(RECALL_K, len(kept["reference"]) - 1)
        if k >= 1:
            metrics["recall_at_10"] = float(
                neighbour_recall(kept["reference"], kept["candidate"], k).mean()
            )
        score = self.finished(metrics, self._note(k, len(kept["reference"])))
        if k >= 1:
            score.worst = _with_neighbours(score.worst, kept, k)
        return score

    def _note(self, k: int, kept: int) -> str:
        if k < 1:
            return "one sample: no neighbours, recall_at_10 not measured"
        parts = [f"recall_at_10 measured as recall_at_{k}" if k < RECALL_K else "recall at k=10"]
        if kept < self.samples:
            parts.append(f"retrieval over the first {kept} of {self.samples} samples")
        return "; ".join(parts)


def _low_cosine(sample: int, cosine: float) -> Disagreement:
    """A sample whose vector turned; `_with_neighbours` adds the neighbours at the end."""
    return Disagreement(
        sample=sample,
        reference="cosine 1 (itself)",
        candidate=f"cosine {cosine:.4f}",
        severity=_distance(cosine),
    )


def _distance(cosine: float) -> float:
    """1 - cosine, with rounding noise (identical vectors: 1e-16) read as agreement."""
    return 0.0 if 1.0 - cosine < SAME_DIRECTION else 1.0 - cosine


def _stacked(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros((0, 0), np.float32)


def _with_neighbours(
    worst: list[Disagreement], kept: dict[str, np.ndarray], k: int
) -> list[Disagreement]:
    """The worst samples (those among the retrieval set) with both sides' nearest samples."""
    rows = np.array([entry.sample for entry in worst if entry.sample < len(kept["reference"])])
    if rows.size == 0:
        return worst
    shown = min(k, SHOWN_NEIGHBOURS)
    near = {
        side: dict(zip(rows.tolist(), nearest(vectors, k, rows)[:, :shown].tolist(), strict=True))
        for side, vectors in kept.items()
    }
    gone = dict(
        zip(
            rows.tolist(),
            lost_neighbours(kept["reference"], kept["candidate"], k, rows),
            strict=True,
        )
    )
    return [
        entry.model_copy(
            update={
                "reference": f"nearest {_listed(near['reference'][entry.sample])}",
                "candidate": f"nearest {_listed(near['candidate'][entry.sample])}; "
                + (f"lost {_listed(gone[entry.sample])}; " if gone[entry.sample] else "")
                + entry.candidate,
            }
        )
        if entry.sample in near["reference"]
        else entry
        for entry in worst
    ]


def _listed(samples: list[int]) -> str:
    return ", ".join(str(sample) for sample in samples)


EMBEDDING = EvaluatorInfo(
    name="embedding",
    label="Embeddings",
    description="Judges an embedding model by its vectors: each sample's cosine with the "
    "original's, and retrieval, the fraction of each sample's 10 nearest neighbours (by the "
    "original's vectors) that the variant's vectors still retrieve. The drill-down lists the "
    "samples with the lowest cosine, with both sides' nearest neighbours.",
    metrics=METRICS,
    default_budget={"recall_at_10": 0.98},
    implementation="optistudio.core.numerics.evaluators.embedding:EmbeddingEvaluator",
    priority=60,
)
