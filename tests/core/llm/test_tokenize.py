"""A text as a decoder's token ids: its tokenizer.json (a tiny BPE trained here), ids from .npy,
and the one-sentence refusal when the model has no tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from decoder_models import build_tiny_decoder
from decoder_tokenizers import TEXT, train_tokenizer

from optistudio.core.errors import DataMismatch
from optistudio.core.llm.tokenize import check_vocabulary, encode, text_ids


def test_a_text_is_encoded_by_the_tokenizer_beside_the_model(tmp_path: Path) -> None:
    model = build_tiny_decoder(tmp_path)
    tokenizer = train_tokenizer(tmp_path)
    (tmp_path / "text.txt").write_text(TEXT)

    ids, how = text_ids(tmp_path / "text.txt", model)

    assert ids.tolist() == tokenizer.encode(TEXT).ids
    assert ids.dtype == np.int64 and how == "text.txt tokenized by tokenizer.json"


def test_without_a_tokenizer_the_refusal_says_what_the_model_lacks_in_one_sentence(
    tmp_path: Path,
) -> None:
    model = build_tiny_decoder(tmp_path)

    with pytest.raises(DataMismatch) as refused:
        encode(TEXT, model, what="text.txt")

    message = refused.value.message
    assert message.count(". ") == 0 and message.endswith(".")
    assert "no tokenizer.json" in message
    assert "give the folder with tokenizer.json, or token ids as .npy" in message


def test_token_ids_come_from_npy_as_they_are(tmp_path: Path) -> None:
    np.save(tmp_path / "ids.npy", np.array([[3, 1], [4, 1]], dtype=np.int32))

    ids, how = text_ids(tmp_path / "ids.npy", tmp_path / "model.onnx")

    assert ids.tolist() == [3, 1, 4, 1] and ids.dtype == np.int64
    assert how == "token ids from ids.npy"


def test_floats_are_not_token_ids(tmp_path: Path) -> None:
    np.save(tmp_path / "ids.npy", np.zeros(4))

    with pytest.raises(DataMismatch, match="not token ids"):
        text_ids(tmp_path / "ids.npy", tmp_path / "model.onnx")


def test_ids_outside_the_vocabulary_are_refused() -> None:
    with pytest.raises(DataMismatch, match="run from 0 to 70, but the model's vocabulary"):
        check_vocabulary(np.array([0, 70]), 64, "ids.npy")
