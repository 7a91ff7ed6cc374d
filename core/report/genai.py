"""The export bundle's `genai/` part: a decoder as ONNX Runtime GenAI loads it, as it is.

For a decoder with a KV cache (optistudio.core.llm.decoder), `genai/` holds the graph under its
own name with its external data, `genai_config.json` (the exporter's, or written from the
decoder's card: optistudio.core.llm.genai_config) and the config and tokenizer files beside the
model (optistudio.core.llm.folder.decoder_files), so that `og.Model("genai")` loads the folder
with nothing added. Another model gets no such part (it is not a language model: nothing to
explain). A decoder whose folder holds no tokenizer gets the part without one, and the
manifest's `skipped` says so: GenAI then generates from token ids, and its tokenizer cannot
load. A written config without an end-of-sequence id (none beside the model names one) is
said there too: GenAI then ends generation at token 0. A decoder whose config cannot be
written (cache names without a layer pattern) is skipped with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from optistudio.core.errors import OptistudioError
from optistudio.core.llm.card import read_card
from optistudio.core.llm.folder import TOKENIZER_FILES, decoder_files, is_decoder_file
from optistudio.core.llm.genai_config import GENAI_CONFIG, genai_config_for

FOLDER = "genai"
RUNS_ON = (
    "ONNX Runtime GenAI (pip install onnxruntime-genai): og.Model('genai') on CPU, or with the "
    "execution provider its genai_config.json session options name"
)
NO_TOKENIZER = (
    "No tokenizer in genai/: none was beside the stored model (the files "
    f"{', '.join(TOKENIZER_FILES[:2])}). GenAI generates from token ids as it is; put the "
    "exporter's tokenizer files into genai/ to give it text."
)
NO_EOS = (
    "No end-of-sequence id in genai/genai_config.json: neither config.json nor "
    "generation_config.json beside the model names one, and ONNX Runtime GenAI then ends "
    "generation at token 0. Set model.eos_token_id there to the tokenizer's."
)


class Members(Protocol):
    """What the bundle writer offers a part: files and JSON documents added under a name."""

    def add_file(self, arcname: str, path: Path) -> None: ...

    def add_json(self, arcname: str, data: Any) -> None: ...


def add_genai(model: Path, members: Members, skipped: dict[str, str]) -> dict[str, Any] | None:
    """Add `genai/` for the decoder at `model`; pipeline.json's "genai" entry, or None when
    `model` is not a decoder (or its config cannot be written: `skipped` says why)."""
    if model.suffix != ".onnx" or not is_decoder_file(model):
        return None
    try:
        config, origin = genai_config_for(read_card(model), model)
    except OptistudioError as exc:
        skipped["genai"] = f"No ONNX Runtime GenAI folder: {exc.message}"
        return None
    files = [path for path in decoder_files(model) if path.name != GENAI_CONFIG]
    for path in files:
        members.add_file(f"{FOLDER}/{path.relative_to(model.parent).as_posix()}", path)
    members.add_json(f"{FOLDER}/{GENAI_CONFIG}", config)
    tokenizer = [path.name for path in files if path.name in TOKENIZER_FILES]
    if not tokenizer:
        skipped["genai_tokenizer"] = NO_TOKENIZER
    if "eos_token_id" not in config["model"]:
        skipped["genai_eos"] = NO_EOS
    return {
        "folder": f"{FOLDER}/",
        "model": f"{FOLDER}/{model.name}",
        "config": origin,
        "tokenizer": tokenizer,
        "runs_on": RUNS_ON,
    }
