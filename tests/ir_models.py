"""OpenVINO IRs made in code, as the studio's passes write them, for the tests of stored IR
variants (content address, artifact store, bundle)."""

from __future__ import annotations

from pathlib import Path

from optistudio.core.model.info import ModelInfo
from optistudio.core.model.intake import inspect_model
from tests.core.passes.test_nncf import build_cnn


def cnn_ir(folder: Path, name: str = "variant") -> tuple[Path, ModelInfo]:
    """The tiny CNN of the NNCF tests (input x [n, 3, 16, 16], output y [n, 4]) converted by
    OpenVINO and saved as `folder/<name>.xml` + `.bin` (FP32 weights), with the ONNX model's
    card (the `like` an IR is stored with)."""
    import openvino as ov

    folder.mkdir(parents=True, exist_ok=True)
    onnx_path = build_cnn(folder)
    target = folder / f"{name}.xml"
    ov.save_model(ov.convert_model(str(onnx_path)), str(target), compress_to_fp16=False)
    return target, inspect_model(onnx_path)
