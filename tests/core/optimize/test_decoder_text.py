"""The text a decoder is judged on: the user's (tokenized, or ids), else built-in text, cut into
windows fed with consistent past and total lengths."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from decoder_models import build_tiny_decoder
from decoder_tokenizers import TEXT, train_tokenizer

from optistudio.core.errors import DataMismatch
from optistudio.core.llm.card import read_card
from optistudio.core.optimize.decoder_text import judged_text


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return build_tiny_decoder(tmp_path / "tiny")


def test_every_window_feeds_consistent_past_and_total_lengths(model: Path, tmp_path: Path) -> None:
    np.save(tmp_path / "ids.npy", np.arange(300) % 64)
    card = read_card(model)

    found = judged_text(model, card, tmp_path / "ids.npy", window=128, max_tokens=1000)

    assert [len(ids) for ids in found.texts] == [128, 128, 44]
    for feeds, ids in zip(found.batches(), found.texts, strict=True):
        assert feeds["input_ids"].tolist() == [ids.tolist()]
        assert feeds["attention_mask"].shape == (1, len(ids))  # past 0 + new
        assert feeds["position_ids"].tolist() == [list(range(len(ids)))]
        assert feeds["past_key_values.0.key"].shape == (1, card.kv_heads, 0, card.head_dim)


def test_the_users_text_is_tokenized_by_the_models_tokenizer(model: Path, tmp_path: Path) -> None:
    tokenizer = train_tokenizer(model.parent)
    (tmp_path / "text.txt").write_text(TEXT)

    found = judged_text(model, read_card(model), tmp_path / "text.txt", window=64, max_tokens=100)

    assert np.concatenate(found.texts).tolist() == tokenizer.encode(TEXT).ids[:100]
    assert found.source == "text.txt tokenized by tokenizer.json" and not found.builtin


def test_built_in_text_is_tokenized_when_the_model_has_a_tokenizer(model: Path) -> None:
    train_tokenizer(model.parent)

    found = judged_text(model, read_card(model), None, window=64, max_tokens=256)

    assert found.builtin and "tokenized by the model's tokenizer.json" in found.source
    assert found.tokens == 256


def test_built_in_text_without_a_tokenizer_hashes_words_and_says_so(model: Path) -> None:
    found = judged_text(model, read_card(model), None, window=64, max_tokens=256)

    assert found.builtin and "each word hashed to one of 64 ids" in found.source
    assert max(int(ids.max()) for ids in found.texts) < 64


def test_a_text_without_a_tokenizer_is_refused(model: Path, tmp_path: Path) -> None:
    (tmp_path / "text.txt").write_text(TEXT)

    with pytest.raises(DataMismatch, match="give the folder with tokenizer.json, or token ids"):
        judged_text(model, read_card(model), tmp_path / "text.txt", window=64, max_tokens=100)
