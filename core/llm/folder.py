"""A decoder as exporters leave it: a folder with the .onnx file and the files beside it.

ONNX Runtime GenAI's model builder writes `genai_config.json` (whose model.decoder.filename
names the graph), the graph, its external data and the tokenizer files; Optimum writes
`model.onnx` with `config.json` and the tokenizer files. Given a folder, the graph is the file
genai_config.json names, else `model.onnx`, else the folder's only .onnx file.

The name genai_config.json gives must stay inside the folder (relative, no "..", no link
leading out: optistudio.core.model.contained); one that does not is refused with the same
sentence whether or not anything exists where it points.
"""

from __future__ import annotations

import json
from pathlib import Path

import onnx

from optistudio.core.errors import InvalidSpec, OptistudioError
from optistudio.core.llm.card import model_files
from optistudio.core.llm.configs import CONFIG_FILES, config_beside
from optistudio.core.llm.convert import checkpoint_architecture
from optistudio.core.llm.decoder import is_decoder, read_decoder_io
from optistudio.core.model.contained import contained

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "tokenizer.model",
    "vocab.json",
    "merges.txt",
)
"""What a tokenizer is saved as (the fast tokenizer.json, and the files of slower ones)."""
DEFAULT_FILE = "model.onnx"
OUTSIDE_FOLDER = (
    "The folder's genai_config.json names a model file (model.decoder.filename) that is not "
    "inside the folder, and only files inside it are read."
)


def decoder_path(path: Path) -> Path:
    """The graph of the decoder at `path`: the file itself, or the one its folder holds."""
    if not path.is_dir():
        return path
    named = _genai_filename(path)
    inside = None if named is None else contained(path, named)
    if named is not None and inside is None:
        raise InvalidSpec(
            OUTSIDE_FOLDER,
            hint="Set model.decoder.filename to the graph's name inside the folder, e.g. "
            f"{DEFAULT_FILE}.",
        )
    if inside is not None and inside.is_file():
        return inside
    if (path / DEFAULT_FILE).is_file():
        return path / DEFAULT_FILE
    found = sorted(path.glob("*.onnx"))
    if len(found) == 1:
        return found[0]
    architecture = checkpoint_architecture(path)
    if not found and architecture is not None:
        raise InvalidSpec(
            f"The folder {path.name} is a Hugging Face checkpoint ({architecture}) with no ONNX "
            "graph yet.",
            hint=f"Convert it first: optistudio llm convert {path} --out {path.name}-onnx "
            "(ONNX Runtime GenAI's model builder, offline), then give that folder.",
        )
    listed = ", ".join(p.name for p in found) or "none"
    raise InvalidSpec(
        f"The folder {path.name} holds {len(found)} .onnx files ({listed}), and neither "
        f"genai_config.json nor the name {DEFAULT_FILE} says which is the model.",
        hint="Give the .onnx file itself.",
    )


def is_decoder_file(path: Path) -> bool:
    """Whether `path` (a file or folder) is a decoder with a KV cache (no weights read)."""
    model = decoder_path(path)
    if model.suffix != ".onnx" or not model.is_file():
        return False
    try:
        graph = onnx.load(str(model), load_external_data=False)
    except Exception:  # noqa: BLE001 - not readable as ONNX: the ordinary intake says why
        return False
    if is_decoder(graph):
        return True
    try:  # a cache of dynamic heads (the GenAI builder's) is sized by the config beside it
        read_decoder_io(graph, config_beside(model))
    except OptistudioError:
        return False
    return True


def decoder_files(model: Path) -> list[Path]:
    """The files that make the decoder `model` (.onnx or OpenVINO .xml) loadable as it is:
    the graph, its external data (an IR: its .bin), and the configs and tokenizer beside it."""
    files = model_files(model)
    for name in (*CONFIG_FILES, *TOKENIZER_FILES):
        if (model.parent / name).is_file():
            files.append(model.parent / name)
    return files


def _genai_filename(folder: Path) -> str | None:
    config = folder / "genai_config.json"
    if not config.is_file():
        return None
    try:
        name = json.loads(config.read_text())["model"]["decoder"]["filename"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return name if isinstance(name, str) and name else None
