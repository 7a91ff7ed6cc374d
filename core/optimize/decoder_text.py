"""The text a decoder's variants are judged on, cut into the windows every variant is fed.

The user's text: a .txt encoded by the tokenizer.json beside the model, or token ids (.npy)
(optistudio.core.llm.tokenize). Without one, built-in text: the sentences of Python's
standard-library docstrings (optistudio.core.data.builtin.corpus), encoded by the model's
tokenizer when it has one, else each word hashed to one id (optistudio.core.data.builtin.tokens:
real word frequencies and sentence lengths, not the model's own tokens). Variants judged on it are
marked "judged on built-in samples, not your data".

At most `max_tokens` ids are kept (the text's start) and cut into windows of `window` tokens
(optistudio.core.llm.perplexity.windows), each fed in one step from an empty cache: input_ids
[1, W], attention_mask ones [1, W], positions 0..W-1 and pasts [1, kv_heads, 0, head_dim], so
past and total lengths agree by construction. The windows are also the tally's labels: each
sample's next tokens are its own ids.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from optistudio.core.data.builtin.corpus import sentences
from optistudio.core.data.builtin.tokens import token_row
from optistudio.core.errors import DataMismatch
from optistudio.core.llm.card import DecoderCard
from optistudio.core.llm.decode import empty_cache, step_feeds
from optistudio.core.llm.perplexity import windows
from optistudio.core.llm.tokenize import can_tokenize, check_vocabulary, encode, text_ids

BUILTIN_TEXT = "Python's standard-library docstrings"


@dataclass
class DecoderWindows:
    """Windows of a text as decoder feeds: a CalibrationSource, one window a batch."""

    card: DecoderCard
    texts: list[np.ndarray]
    source: str = ""
    """Where the ids came from, in words."""
    builtin: bool = False
    synthetic: bool = False

    def batches(self) -> Iterator[dict[str, np.ndarray]]:
        for ids in self.texts:
            yield step_feeds(self.card.io, ids[None], empty_cache(self.card.io, 1))

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def tokens(self) -> int:
        return int(sum(len(ids) for ids in self.texts))

    @property
    def description(self) -> str:
        width = max(len(ids) for ids in self.texts)
        return f"{self.source}: {self.tokens} tokens in {len(self)} windows of up to {width}"


def judged_text(
    model: Path, card: DecoderCard, text: Path | None, *, window: int, max_tokens: int
) -> DecoderWindows:
    """The windows of the user's `text`, else of the built-in text (module docstring)."""
    width = min(window, card.context_length or window)
    if text is not None:
        ids, how = text_ids(text, model)
        return _cut(card, ids, how, width, max_tokens, builtin=False)
    if can_tokenize(model):
        ids = encode(" ".join(sentences()), model, what="the built-in text")
        how = f"built-in text ({BUILTIN_TEXT}) tokenized by the model's tokenizer.json"
        return _cut(card, ids, how, width, max_tokens, builtin=True)
    vocab = card.vocab or 2
    ids = token_row(0, max_tokens, vocab)
    how = (
        f"built-in text ({BUILTIN_TEXT}), each word hashed to one of {vocab} ids: no "
        "tokenizer.json beside the model (or no tokenizers package), so not its own tokens"
    )
    return _cut(card, ids, how, width, max_tokens, builtin=True)


def _cut(
    card: DecoderCard, ids: np.ndarray, how: str, width: int, max_tokens: int, *, builtin: bool
) -> DecoderWindows:
    kept = np.asarray(ids, dtype=np.int64).reshape(-1)[:max_tokens]
    if len(kept) < 2:
        raise DataMismatch(
            f"The evaluation text ({how}) has {len(kept)} token(s); perplexity needs at least 2.",
            hint="Give a longer text.",
        )
    check_vocabulary(kept, card.vocab, how)
    return DecoderWindows(card=card, texts=list(windows(kept, width)), source=how, builtin=builtin)
