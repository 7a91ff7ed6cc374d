"""A tiny decoder over a lowered upload limit: the decoder of tests/decoder_models.py with a
vocabulary large enough that its weights pass 1 MiB, kept as external data beside the graph
(as exporters keep a large model's weights)."""

from __future__ import annotations

from pathlib import Path

import onnx
from decoder_models import TinyShape, build_tiny_decoder

MiB = 2**20
OVER_ONE_MIB = TinyShape(vocab=2048)
"""Embedding and LM head 2048 x 64 float32 each: about 1.3 MiB of weights in all."""


def large_decoder(folder: Path) -> Path:
    """`folder`/model.onnx with its weights in model.onnx.data and genai_config.json."""
    path = build_tiny_decoder(folder, OVER_ONE_MIB)
    model = onnx.load(str(path))
    onnx.save(model, str(path), save_as_external_data=True, location="model.onnx.data")
    return path


def folder_bytes(folder: Path) -> int:
    return sum(file.stat().st_size for file in folder.iterdir() if file.is_file())
