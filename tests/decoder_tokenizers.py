"""A tiny byte-pair tokenizer trained in a test, saved as the tokenizer.json exporters write.

Needs the `tokenizers` package; a test that uses it is skipped, with the reason, without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

TEXT = "the quick brown fox jumps over the lazy dog. " * 20


def train_tokenizer(folder: Path, vocab: int = 60, text: str = TEXT) -> Any:
    """A BPE tokenizer of at most `vocab` ids trained on `text`, saved to folder/tokenizer.json
    (skips the calling test when the tokenizers package is missing)."""
    tokenizers = pytest.importorskip(
        "tokenizers", reason="the tokenizers package is not installed (pip install tokenizers)"
    )
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=vocab, special_tokens=["[UNK]"])
    tokenizer.train_from_iterator([text], trainer=trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    return tokenizer
