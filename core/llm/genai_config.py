"""The `genai_config.json` ONNX Runtime GenAI reads beside a decoder, kept or written from its card.

When the decoder's folder has one (its exporter was GenAI's model builder), it is kept, with
model.decoder.filename set to the graph's own name (a variant's file may be named otherwise
than its original's). Otherwise it is written in the builder's schema from the card: the
model's type (config.json's `model_type` when GenAI knows it, else its generic "decoder"),
context length, layers, heads, KV heads, head size, hidden size, vocabulary, the names of the
token inputs, logits and of the KV cache as GenAI patterns ("past_key_values.%d.key" for layer
N's "past_key_values.N.key"), and a greedy search that allocates a new cache every step
(`past_present_share_buffer` false: the graph returns pasts + new tokens, not a fixed buffer).
The bos / eos / pad ids come from config.json or generation_config.json beside it; without
them they are left out, and generation stops at max_length.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from optistudio.core.errors import ModelRejected
from optistudio.core.llm.card import DecoderCard

logger = logging.getLogger(__name__)

GENAI_CONFIG = "genai_config.json"
GENAI_TYPES = frozenset(
    {"chatglm", "decoder", "ernie4_5", "gemma", "gpt2", "granite", "llama", "mistral"}
    | {"nemotron", "olmo", "phi", "phi3", "qwen2", "qwen3", "smollm3"}
)
"""model.type values GenAI 0.18 drives as decoder-only language models."""
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")
_LAYER = re.compile(r"(?<![0-9])0(?![0-9])")


def genai_config_for(card: DecoderCard, model: Path) -> tuple[dict[str, Any], str]:
    """The config for the decoder at `model` and where it came from ("genai_config.json" beside
    it, or "written from the model card")."""
    found = _read(model.parent / GENAI_CONFIG)
    decoder = _decoder_entry(found)
    if found is not None and decoder is not None:
        decoder["filename"] = model.name
        return found, GENAI_CONFIG
    return written_config(card, model.name, _beside(model)), "written from the model card"


def renamed_config(config: Path, filename: str) -> str | None:
    """The text of the genai_config.json at `config` with model.decoder.filename set to
    `filename` (the name the catalog stores the graph under), or None when it names that file
    already (or none) or is no such config (it is then kept as it is)."""
    found = _read(config)
    decoder = _decoder_entry(found)
    if decoder is None or decoder.get("filename", filename) == filename:
        return None
    decoder["filename"] = filename
    return json.dumps(found, indent=4) + "\n"


def _decoder_entry(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """The config's model.decoder object, None when it has none."""
    model = (config or {}).get("model")
    decoder = model.get("decoder") if isinstance(model, dict) else None
    return decoder if isinstance(decoder, dict) else None


def written_config(
    card: DecoderCard, filename: str, hf: dict[str, Any] | None = None
) -> dict[str, Any]:
    """genai_config.json in the model builder's schema from `card` (module docstring)."""
    hf = hf or {}
    io = card.io
    inputs = {"input_ids": io.input_ids, "attention_mask": io.attention_mask}
    if io.position_ids is not None:
        inputs["position_ids"] = io.position_ids
    inputs |= {
        "past_key_names": layer_pattern(io.past_keys),
        "past_value_names": layer_pattern(io.past_values),
    }
    outputs = {
        "logits": io.logits,
        "present_key_names": layer_pattern(io.present_keys),
        "present_value_names": layer_pattern(io.present_values),
    }
    decoder = {
        "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
        "filename": filename,
        "head_size": card.head_dim,
        "hidden_size": card.hidden or card.head_dim * (card.heads or card.kv_heads),
        "inputs": inputs,
        "outputs": outputs,
        "num_attention_heads": card.heads or card.kv_heads,
        "num_hidden_layers": card.layers,
        "num_key_value_heads": card.kv_heads,
    }
    model_type = hf.get("model_type")
    model: dict[str, Any] = {
        "context_length": card.context_length,
        "decoder": decoder,
        "type": model_type if model_type in GENAI_TYPES else "decoder",
        "vocab_size": card.vocab,
    }
    model |= {key: hf[key] for key in TOKEN_IDS if _token_id(hf.get(key))}
    return {"model": model, "search": _search(card)}


def layer_pattern(names: list[str]) -> str:
    """The GenAI pattern of per-layer names: "past_key_values.%d.key" for
    past_key_values.0.key, .1.key, ...; ModelRejected when the names follow none."""
    pattern = _LAYER.sub("%d", names[0], count=1) if names else ""
    if "%d" not in pattern or any(name != pattern % i for i, name in enumerate(names)):
        raise ModelRejected(
            f"The cache names {names[:2]}... follow no pattern with the layer number in it, "
            "which ONNX Runtime GenAI's config needs.",
            hint="Export the decoder with GenAI's model builder or Optimum's names.",
        )
    return pattern


def _token_id(value: Any) -> bool:
    """An id, or a list of them (Llama 3 names two eos ids)."""
    values = value if isinstance(value, list) else [value]
    return bool(values) and all(isinstance(v, int) and not isinstance(v, bool) for v in values)


def _search(card: DecoderCard) -> dict[str, Any]:
    return {
        "diversity_penalty": 0.0,
        "do_sample": False,
        "early_stopping": True,
        "length_penalty": 1.0,
        "max_length": card.context_length or 2048,
        "min_length": 0,
        "no_repeat_ngram_size": 0,
        "num_beams": 1,
        "num_return_sequences": 1,
        "past_present_share_buffer": False,
        "repetition_penalty": 1.0,
        "temperature": 1.0,
        "top_k": 1,
        "top_p": 1.0,
    }


def _beside(model: Path) -> dict[str, Any]:
    """config.json's fields, with generation_config.json's token ids over them."""
    merged = _read(model.parent / "config.json") or {}
    generation = _read(model.parent / "generation_config.json") or {}
    return merged | {key: generation[key] for key in TOKEN_IDS if key in generation}


def _read(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        logger.warning("ignoring %s: %s", path, exc)
        return None
    return found if isinstance(found, dict) else None
