"""How well a decoder predicts a text, and how close a variant's predictions stay to FP32's.

The token ids are cut into windows of W tokens, each run in one step from an empty cache; in a
window, the logits at position i predict token i+1 (W-1 predictions a window, the context starts
afresh in each). With p the softmax of the logits:

- perplexity = exp(mean over predictions of -ln p(next token));
- top-1 agreement = share of predictions where the variant's argmax equals the reference's;
- mean KL = mean over predictions of sum_v p_ref(v) ln(p_ref(v) / p_var(v)), in nats;
- perplexity increase = perplexity_variant / perplexity_reference - 1.

Log-softmax is computed in float64, so a flat distribution over a large vocabulary loses
nothing to rounding.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import DataMismatch
from optistudio.core.llm.decode import DecoderSession

DEFAULT_WINDOW = 128


class TextScore(BaseModel):
    model_config = ConfigDict(extra="forbid")

    perplexity: float
    predictions: int = Field(description="Tokens scored (each window's first is context only).")
    windows: int


class TextAgreement(BaseModel):
    """A variant against its reference on the same windows of the same text."""

    model_config = ConfigDict(extra="forbid")

    reference_perplexity: float
    perplexity: float
    perplexity_increase: float = Field(description="perplexity / reference_perplexity - 1.")
    top1_agreement: float
    mean_kl: float = Field(description="Mean KL(reference || variant) per prediction, nats.")
    predictions: int
    windows: int


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """ln softmax over the last axis, in float64."""
    values = logits.astype(np.float64)
    shifted = values - values.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def next_token_nll(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """-ln p(ids[i+1]) from logits [T, vocab] of ids [T]: T-1 values."""
    logp = log_softmax(logits[:-1])
    return -logp[np.arange(len(ids) - 1), ids[1:]]


def kl_divergence(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """KL(softmax(reference) || softmax(candidate)) per row of logits [N, vocab], nats."""
    ref, cand = log_softmax(reference), log_softmax(candidate)
    return np.asarray((np.exp(ref) * (ref - cand)).sum(axis=-1))


def windows(ids: np.ndarray, window: int) -> Iterator[np.ndarray]:
    """`ids` [N] in consecutive windows of `window` tokens; a last shorter one if it has >= 2."""
    flat = _token_ids(ids)
    if window < 2:
        raise DataMismatch(f"A perplexity window needs at least 2 tokens; got {window}.")
    for start in range(0, len(flat), window):
        chunk = flat[start : start + window]
        if len(chunk) >= 2:
            yield chunk


def perplexity(
    session: DecoderSession, ids: np.ndarray, *, window: int = DEFAULT_WINDOW
) -> TextScore:
    """Perplexity of `session` on the token ids `ids` [N]."""
    losses = [
        next_token_nll(session.logits(chunk[None])[0], chunk) for chunk in windows(ids, window)
    ]
    nll = np.concatenate(losses)
    return TextScore(
        perplexity=float(np.exp(nll.mean())), predictions=len(nll), windows=len(losses)
    )


def agreement(
    reference: DecoderSession,
    candidate: DecoderSession,
    ids: np.ndarray,
    *,
    window: int = DEFAULT_WINDOW,
) -> TextAgreement:
    """Perplexity, top-1 agreement and mean KL of `candidate` against `reference` on `ids`."""
    ref_nll, cand_nll, same, kl = [], [], [], []
    count = 0
    for chunk in windows(ids, window):
        ref_logits = reference.logits(chunk[None])[0]
        cand_logits = candidate.logits(chunk[None])[0]
        ref_nll.append(next_token_nll(ref_logits, chunk))
        cand_nll.append(next_token_nll(cand_logits, chunk))
        same.append(ref_logits[:-1].argmax(-1) == cand_logits[:-1].argmax(-1))
        kl.append(kl_divergence(ref_logits[:-1], cand_logits[:-1]))
        count += 1
    return _agreement(ref_nll, cand_nll, same, kl, count)


def _agreement(
    ref_nll: list[np.ndarray],
    cand_nll: list[np.ndarray],
    same: list[np.ndarray],
    kl: list[np.ndarray],
    count: int,
) -> TextAgreement:
    ref_ppl = float(np.exp(np.concatenate(ref_nll).mean()))
    ppl = float(np.exp(np.concatenate(cand_nll).mean()))
    return TextAgreement(
        reference_perplexity=ref_ppl,
        perplexity=ppl,
        perplexity_increase=ppl / ref_ppl - 1,
        top1_agreement=float(np.concatenate(same).mean()),
        mean_kl=float(np.concatenate(kl).mean()),
        predictions=int(sum(len(s) for s in same)),
        windows=count,
    )


def _token_ids(ids: np.ndarray) -> np.ndarray:
    flat = np.asarray(ids)
    if flat.ndim != 1 or not np.issubdtype(flat.dtype, np.integer):
        raise DataMismatch(
            f"Perplexity needs a text as one row of token ids; got {flat.dtype} of shape "
            f"{list(flat.shape)}.",
            hint="Tokenize the text with the model's tokenizer and pass the ids as int64.",
        )
    if len(flat) < 2:
        raise DataMismatch(f"Perplexity needs at least 2 tokens of text; got {len(flat)}.")
    return flat.astype(np.int64)
