"""The config a decoder's exporter writes beside it, read for the facts a graph may not state.

ONNX Runtime GenAI's model builder writes `genai_config.json` (model.decoder.num_attention_heads,
num_key_value_heads, head_size; model.context_length, model.vocab_size), Hugging Face / Optimum
a `config.json` (num_attention_heads, num_key_value_heads, head_dim or hidden_size / heads,
max_position_embeddings, vocab_size). The first of the two found wins.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

logger = logging.getLogger(__name__)

CONFIG_FILES = ("genai_config.json", "config.json")


class ConfigFacts(BaseModel):
    """What the config says, None where it says nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str = Field(default="", description="The file read; '' when there was none.")
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    context_length: int | None = None
    vocab: int | None = None


def config_beside(path: Path) -> ConfigFacts:
    """The facts of the first config file beside the model at `path`, else an empty one."""
    for name in CONFIG_FILES:
        candidate = path.parent / name
        if candidate.is_file():
            try:
                return _facts(json.loads(candidate.read_text()), name)
            except (OSError, ValueError) as exc:
                logger.warning("ignoring %s: %s", candidate, exc)
    return ConfigFacts()


def _facts(config: dict[str, Any], source: str) -> ConfigFacts:
    model = config.get("model", {})
    decoder = model.get("decoder", {})
    heads = _int(decoder.get("num_attention_heads", config.get("num_attention_heads")))
    hidden = _int(decoder.get("hidden_size", config.get("hidden_size")))
    head_dim = _int(decoder.get("head_size", config.get("head_dim")))
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    return ConfigFacts(
        source=source,
        heads=heads,
        kv_heads=_int(decoder.get("num_key_value_heads", config.get("num_key_value_heads"))),
        head_dim=head_dim,
        context_length=_int(model.get("context_length", config.get("max_position_embeddings"))),
        vocab=_int(model.get("vocab_size", config.get("vocab_size"))),
    )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
