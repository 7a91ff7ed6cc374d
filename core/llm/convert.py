"""A local Hugging Face checkpoint converted into a decoder folder by ONNX Runtime GenAI's model
builder, offline.

A checkpoint is a folder with `config.json` naming its architecture (`architectures`, e.g.
LlamaForCausalLM, Qwen2ForCausalLM, Phi3ForCausalLM), its weights (`model.safetensors`,
sharded or not, or `pytorch_model.bin`) and its tokenizer. The builder
(`python -m onnxruntime_genai.models.builder -i DIR -o OUT -p fp32|int4 -e cpu`) writes the
graph with its KV cache, its external data, `genai_config.json` and the tokenizer files: a
folder every command and page takes as a decoder. It runs in its own process with the hubs
switched off (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE): nothing is fetched, and a checkpoint that
would need a download fails saying so. The builder needs the `genai` extra (onnxruntime-genai,
transformers, torch): `pip install 'optistudio[genai]'`.

What the builder supports is its own list (it names an unsupported architecture, and that
sentence is the error); GPT-2 is not on it in onnxruntime-genai 0.18, so a GPT-2 checkpoint is
refused there, in the builder's words.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Literal

from optistudio.core.errors import InvalidSpec, ModelRejected

Precision = Literal["fp32", "int4"]
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
TOKENIZERS = ("tokenizer.json", "tokenizer.model")
BUILDER_MODULES = ("onnxruntime_genai", "transformers", "torch")
TIMEOUT_S = 3600.0
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def checkpoint_architecture(path: Path) -> str | None:
    """The architecture a Hugging Face checkpoint folder declares; None for anything else."""
    config = path / "config.json"
    if not path.is_dir() or not config.is_file():
        return None
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        return None
    try:
        declared = json.loads(config.read_text()).get("architectures") or []
    except (OSError, ValueError, AttributeError):
        return None
    return str(declared[0]) if declared else None


def convert_checkpoint(
    source: Path, out: Path, *, precision: Precision = "fp32", timeout_s: float = TIMEOUT_S
) -> Path:
    """Convert the checkpoint at `source` into the decoder folder `out`; returns `out`."""
    architecture = checkpoint_architecture(source)
    if architecture is None:
        raise InvalidSpec(
            f"{source} is not a Hugging Face checkpoint: it needs config.json with "
            f"'architectures' and weights ({' or '.join(WEIGHT_FILES[::2])}).",
            hint="Give the folder save_pretrained wrote.",
        )
    if not any((source / name).is_file() for name in TOKENIZERS):
        raise InvalidSpec(
            f"The checkpoint {source.name} has no tokenizer ({' or '.join(TOKENIZERS)}); the "
            "builder writes one beside the graph and cannot without it.",
            hint="Save the tokenizer into the folder (tokenizer.save_pretrained(folder)).",
        )
    missing = [name for name in BUILDER_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise InvalidSpec(
            f"Converting a checkpoint needs ONNX Runtime GenAI's model builder, and "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed.",
            hint="pip install 'optistudio[genai]' (onnxruntime-genai, transformers, torch).",
        )
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="optistudio-builder-") as cache:
        command = [sys.executable, "-m", "onnxruntime_genai.models.builder"]
        command += ["-m", str(source), "-i", str(source), "-o", str(out)]
        command += ["-p", precision, "-e", "cpu", "-c", cache]
        try:
            done = subprocess.run(
                command,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=os.environ | OFFLINE,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ModelRejected(
                f"The model builder did not finish converting {source.name} within "
                f"{timeout_s:.0f} s.",
                hint="Convert a smaller checkpoint, or run the builder yourself.",
            ) from None
    if done.returncode != 0:
        raise ModelRejected(
            f"The model builder could not convert {source.name} ({architecture}): "
            f"{_last_error(done.stderr)}",
            hint="Its architectures: Llama, Mistral, Qwen2, Phi-3 and others it lists; nothing "
            "is fetched from a hub, so every file must be in the folder.",
        )
    if not (out / "genai_config.json").is_file():
        raise ModelRejected(
            f"The model builder wrote no genai_config.json into {out}.",
            hint="Run it yourself to see why: python -m onnxruntime_genai.models.builder -h",
        )
    return out


def _last_error(stderr: str) -> str:
    """The builder's own last error line (its traceback's last line), at most 300 characters."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line.split(":", 1)[0]]
    return (errors or lines or ["no message"])[-1][:300]
