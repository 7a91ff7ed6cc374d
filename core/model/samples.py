"""Sample models for "pick a sample": small ones built in code, pretrained ones when installed.

Built samples are deterministic (seeded weights), so the same name always gives the same file
and the same content address in the artifact store.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.errors import OptistudioError, UnknownName

SAMPLE_OPSET = 17
SAMPLE_IR_VERSION = 8
"""IR 8 so that older ONNX Runtime releases (1.14+) load the samples too."""

TOKEN_VOCAB = 100
"""Embedding rows of tiny_mlp_tokens: ids in [0, 100), what optistudio.core.data.inputs synthesizes."""

_RAPIDOCR_PACKAGE = "rapidocr_onnxruntime"
_RAPIDOCR_DET_FILE = "ch_PP-OCRv4_det_infer.onnx"


@dataclass(frozen=True)
class SampleModel:
    """A sample the studio offers; `build(folder)` writes it there and returns its path.

    `input_shapes` are full shapes (by input name) the model needs where the defaults for its
    dynamic dims would not run, e.g. a detector whose sides must be multiples of 32.
    """

    name: str
    label: str
    description: str
    build: Callable[[Path], Path]
    input_shapes: dict[str, list[int]] = field(default_factory=dict)


def list_samples() -> list[SampleModel]:
    """The samples available here; pretrained ones only when their package is installed."""
    samples = [TINY_CNN, TINY_MLP_TOKENS]
    if importlib.util.find_spec(_RAPIDOCR_PACKAGE) is not None:
        samples.append(RAPIDOCR_DET)
    return samples


def build_sample(name: str, folder: Path) -> Path:
    """Write sample `name` into `folder` (created if needed) and return the .onnx path."""
    samples = {sample.name: sample for sample in list_samples()}
    if name not in samples:
        raise UnknownName(
            f"Unknown sample {name!r}. Valid names: {', '.join(sorted(samples))}.",
            hint=f"pip install {_RAPIDOCR_PACKAGE.replace('_', '-')} for the pretrained samples.",
        )
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return samples[name].build(folder)


def _build_tiny_cnn(folder: Path) -> Path:
    rng = np.random.default_rng(0)
    weights = [
        _he("conv1.w", (8, 1, 3, 3), rng),
        _zeros("conv1.b", 8),
        _he("conv2.w", (16, 8, 3, 3), rng),
        _zeros("conv2.b", 16),
        _he("fc.w", (10, 16 * 7 * 7), rng),
        _zeros("fc.b", 10),
    ]
    conv: dict[str, Any] = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    pool: dict[str, Any] = {"kernel_shape": [2, 2], "strides": [2, 2]}
    nodes = [
        helper.make_node("Conv", ["image", "conv1.w", "conv1.b"], ["c1"], **conv),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], **pool),
        helper.make_node("Conv", ["p1", "conv2.w", "conv2.b"], ["c2"], **conv),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p2"], **pool),
        helper.make_node("Flatten", ["p2"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])],
        initializer=weights,
    )
    return _save(graph, folder / "tiny_cnn.onnx")


def _build_tiny_mlp_tokens(folder: Path) -> Path:
    """Masked mean of token embeddings, then a two-layer MLP: [batch, sequence] -> [batch, 2]."""
    rng = np.random.default_rng(1)
    weights = [
        numpy_helper.from_array(
            rng.standard_normal((TOKEN_VOCAB, 16)).astype(np.float32), "embedding"
        ),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "seq_axis"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "feature_axis"),
        numpy_helper.from_array(np.array(1.0, dtype=np.float32), "one"),
        _he("fc1.w", (32, 16), rng),
        _zeros("fc1.b", 32),
        _he("fc2.w", (2, 32), rng),
        _zeros("fc2.b", 2),
    ]
    nodes = [
        helper.make_node("Gather", ["embedding", "input_ids"], ["embedded"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "feature_axis"], ["mask3"]),
        helper.make_node("Mul", ["embedded", "mask3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "seq_axis"], ["summed"], keepdims=0),
        helper.make_node("ReduceSum", ["mask3", "seq_axis"], ["count"], keepdims=0),
        helper.make_node("Max", ["count", "one"], ["safe_count"]),
        helper.make_node("Div", ["summed", "safe_count"], ["pooled"]),
        helper.make_node("Gemm", ["pooled", "fc1.w", "fc1.b"], ["h"], transB=1),
        helper.make_node("Relu", ["h"], ["h_act"]),
        helper.make_node("Gemm", ["h_act", "fc2.w", "fc2.b"], ["logits"], transB=1),
    ]
    token_shape = ["batch", "sequence"]
    graph = helper.make_graph(
        nodes,
        "tiny_mlp_tokens",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, token_shape),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, token_shape),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 2])],
        initializer=weights,
    )
    return _save(graph, folder / "tiny_mlp_tokens.onnx")


def _copy_rapidocr_det(folder: Path) -> Path:
    source = _rapidocr_det_file()
    target = folder / source.name
    shutil.copyfile(source, target)
    return target


def _rapidocr_det_file() -> Path:
    """The package's text-detection model, found without importing the (heavy) package."""
    spec = importlib.util.find_spec(_RAPIDOCR_PACKAGE)
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    for root in roots:
        preferred = root / "models" / _RAPIDOCR_DET_FILE
        candidates = [preferred] if preferred.is_file() else sorted(root.rglob("*det*.onnx"))
        if candidates:
            return candidates[0]
    raise OptistudioError(
        f"No text-detection model (*det*.onnx) found in the {_RAPIDOCR_PACKAGE} package.",
        hint="Reinstall rapidocr-onnxruntime.",
    )


def _he(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> TensorProto:
    """He-normal weights: std = sqrt(2 / fan_in), fan_in = prod(shape[1:])."""
    fan_in = int(np.prod(shape[1:]))
    values = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
    return numpy_helper.from_array(values.astype(np.float32), name)


def _zeros(name: str, size: int) -> TensorProto:
    return numpy_helper.from_array(np.zeros(size, dtype=np.float32), name)


def _save(graph: onnx.GraphProto, path: Path) -> Path:
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", SAMPLE_OPSET)],
        ir_version=SAMPLE_IR_VERSION,
        producer_name="optistudio.samples",
    )
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


TINY_CNN = SampleModel(
    name="tiny_cnn",
    label="Tiny CNN (28x28 images)",
    description=(
        "A small image classifier built in code: two Conv+ReLU+MaxPool blocks and a Gemm, "
        "input 'image' [batch, 1, 28, 28], output 'logits' [batch, 10]. Its weights are random "
        "(seeded), not trained: use it to study speed and optimizations, not accuracy."
    ),
    build=_build_tiny_cnn,
)

TINY_MLP_TOKENS = SampleModel(
    name="tiny_mlp_tokens",
    label="Tiny token MLP (int64 ids, dynamic sequence)",
    description=(
        "A token classifier built in code: embedding lookup, masked mean over the sequence, "
        "two-layer MLP. Inputs 'input_ids' and 'attention_mask' are int64 [batch, sequence] "
        f"(ids below {TOKEN_VOCAB}); output 'logits' [batch, 2]. Weights are random (seeded): "
        "it exercises integer inputs and a dynamic sequence dim, not accuracy."
    ),
    build=_build_tiny_mlp_tokens,
)

RAPIDOCR_DET = SampleModel(
    name="rapidocr_det",
    label="PP-OCRv4 text detection",
    description=(
        "PP-OCRv4 text detection (pretrained, from rapidocr-onnxruntime). Image sides must be "
        "multiples of 32."
    ),
    build=_copy_rapidocr_det,
    input_shapes={"x": [1, 3, 640, 640]},
)
