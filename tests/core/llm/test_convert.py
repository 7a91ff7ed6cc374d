"""A local Hugging Face checkpoint into a decoder folder (optistudio.core.llm.convert): what is a
checkpoint, what it lacks said in one sentence, and (the genai extra) a real conversion by ONNX
Runtime GenAI's model builder whose greedy tokens through our backend are transformers' and
whose perplexity through ONNX Runtime is PyTorch's within 1 %."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from optistudio.core.errors import InvalidSpec
from optistudio.core.llm import convert
from optistudio.core.llm.convert import checkpoint_architecture, convert_checkpoint
from optistudio.core.llm.folder import decoder_path, is_decoder_file


def _checkpoint_files(folder: Path, *, tokenizer: bool = True) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    (folder / "model.safetensors").write_bytes(b"\0" * 8)
    if tokenizer:
        (folder / "tokenizer.json").write_text("{}")
    return folder


def test_a_checkpoint_is_its_config_and_weights(tmp_path: Path) -> None:
    folder = _checkpoint_files(tmp_path / "hf")
    assert checkpoint_architecture(folder) == "LlamaForCausalLM"
    (folder / "model.safetensors").unlink()
    assert checkpoint_architecture(folder) is None  # no weights: not a checkpoint
    assert checkpoint_architecture(tmp_path / "missing") is None


def test_a_checkpoint_given_as_a_decoder_is_told_how_to_convert_it(tmp_path: Path) -> None:
    folder = _checkpoint_files(tmp_path / "hf")
    with pytest.raises(InvalidSpec) as refused:
        decoder_path(folder)
    assert "Hugging Face checkpoint (LlamaForCausalLM)" in refused.value.message
    assert "optistudio llm convert" in (refused.value.hint or "")
    with pytest.raises(InvalidSpec, match="Hugging Face checkpoint"):
        is_decoder_file(folder)  # what takes a folder (a .zip upload, `bench DIR`) says so too


def test_what_a_conversion_lacks_is_named(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidSpec, match="no tokenizer"):
        convert_checkpoint(_checkpoint_files(tmp_path / "a", tokenizer=False), tmp_path / "o")
    monkeypatch.setattr(convert.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InvalidSpec, match="onnxruntime_genai, transformers, torch are not") as no:
        convert_checkpoint(_checkpoint_files(tmp_path / "b"), tmp_path / "o")
    assert "optistudio[genai]" in (no.value.hint or "")
    with pytest.raises(InvalidSpec, match="not a Hugging Face checkpoint"):
        convert_checkpoint(tmp_path, tmp_path / "o")


def _tiny_llama(folder: Path):  # type: ignore[no-untyped-def]
    """A 2-layer Llama (grouped-query attention) with a byte-level BPE trained on a stdlib file."""
    torch = pytest.importorskip("torch", reason="the genai extra is not installed")
    transformers = pytest.importorskip("transformers", reason="the genai extra is not installed")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tokenizer.train_from_iterator(Path(json.__file__).read_text().splitlines(), trainer)
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    config = transformers.LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=128, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    fast.save_pretrained(folder)
    return model, config


@pytest.mark.extras
def test_the_builder_converts_a_checkpoint_that_decodes_as_transformers_does(
    tmp_path: Path,
) -> None:
    pytest.importorskip("onnxruntime_genai", reason="the genai extra is not installed")
    import torch

    from optistudio.core.backends.base import SessionOptions
    from optistudio.core.llm import open_decoder, read_card
    from optistudio.core.llm.decode import greedy
    from optistudio.core.llm.perplexity import perplexity

    model, config = _tiny_llama(tmp_path / "hf")
    out = convert_checkpoint(tmp_path / "hf", tmp_path / "onnx")

    assert (out / "genai_config.json").is_file() and is_decoder_file(out)
    card = read_card(decoder_path(out))
    assert (card.layers, card.heads, card.kv_heads) == (2, 4, 2)
    assert (card.vocab, card.context_length) == (config.vocab_size, 128)
    prompt = np.array([[5, 9, 17, 3, 40, 77]])
    text = np.random.default_rng(0).integers(4, config.vocab_size, 96)
    session = open_decoder(decoder_path(out), options=SessionOptions(threads=1), io=card.io)
    try:
        ours = greedy(session, prompt, 8).tokens[0].tolist()
        score = perplexity(session, text, window=48)
    finally:
        session.close()
    with torch.no_grad():  # the same windows: each predicts its tokens after the first
        chunks = torch.tensor(text).reshape(2, 48)
        losses = [model(input_ids=c[None], labels=c[None]).loss for c in chunks]
    assert score.perplexity == pytest.approx(float(torch.exp(torch.stack(losses).mean())), rel=0.01)
    with torch.no_grad():
        theirs = model.generate(
            torch.tensor(prompt), max_new_tokens=8, do_sample=False, output_logits=True,
            return_dict_in_generate=True, pad_token_id=0,
        )  # fmt: skip
    expected = theirs.sequences[0, prompt.shape[1] :].tolist()
    # compared up to the first near-tie of transformers' own logits (float order may flip it)
    for step, logits in enumerate(theirs.logits):
        top = torch.topk(logits[0], 2).values
        if float(top[0] - top[1]) < 1e-4:
            break
        assert ours[step] == expected[step], (step, ours, expected)
