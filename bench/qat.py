"""Quantization-aware training against post-training INT8, on CNNs trained here on digits.

Models (trained in code, seeded, on scikit-learn's digits upsampled to 32x32; 75/25 stratified
split: 1347 training images, 450 held-out test images with labels):
  mobilenet  depthwise-separable CNN in MobileNet's style: a 3x3 stem, then four blocks of a
             depthwise 3x3 + BN + ReLU6 and a pointwise 1x1 + BN + ReLU6, global average
             pooling, a Linear head (the kind of model post-training INT8 is said to hurt;
             on this one ONNX Runtime's static INT8 loses nothing, see docs/BENCHMARKS.md)
  cnn        the plain 3-block CNN of bench/reference_models.py (Conv-BN-ReLU-MaxPool x3)

For each model one `optimize` run (optistudio.core.optimize.run) on ONNX Runtime with the
post-training INT8 recipes the project offers (static MinMax, MSE, Percentile, and the
accuracy-aware mixed precision) and `qat` (trained on the training split with its labels; the
test split is never trained on). Every variant gets the run's accuracy report on the 450 test
images (top-1 against the labels) and its interleaved timing against FP32 (speedup with a 95 %
interval). QAT's training time and epochs come from its pass report.

Target (issue 20): QAT within 1 point of FP32 top-1 where post-training INT8 loses 3 or more,
at the speed of static INT8.

Run: /work/venv-qat/bin/python bench/qat.py [--models mobilenet,cnn] [--seconds 3] [--epochs 8]
(needs the qat extra: torch 2.13 and scikit-learn).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import reference_models  # noqa: E402

from optistudio.core.data.datasets import NpzDataset  # noqa: E402
from optistudio.core.machine.environment import fingerprint  # noqa: E402
from optistudio.core.measure.compare import ComparisonSpec  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.optimize.run import OptimizeSpec, optimize  # noqa: E402

FOLDER = REPO / "data" / "bench-models"
PTQ = ["int8_static", "int8_static_mse", "int8_static_percentile", "int8_mixed"]
MOBILENET_EPOCHS = 12


def _mobilenet_module():
    torch = reference_models._torch()
    nn = torch.nn

    def conv(cin: int, cout: int, k: int, stride: int, groups: int = 1) -> list:
        return [
            nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            nn.ReLU6(),
        ]

    def separable(cin: int, cout: int, stride: int) -> list:
        return conv(cin, cin, 3, stride, groups=cin) + conv(cin, cout, 1, 1)

    return nn.Sequential(
        *conv(1, 16, 3, 1),
        *separable(16, 32, 2),  # 32 -> 16
        *separable(32, 64, 2),  # 16 -> 8
        *separable(64, 64, 1),
        *separable(64, 128, 2),  # 8 -> 4
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )


def mobilenet_digits(folder: Path) -> Path:
    """Train (seeded) and export the MobileNet-style digits CNN."""
    path = folder / "digits-mobilenet.onnx"
    if path.exists():
        return path
    torch = reference_models._torch()
    torch.manual_seed(reference_models.SEED)
    x_train, x_test, y_train, y_test = reference_models._digits_arrays()
    model = _mobilenet_module()
    seconds, top1 = reference_models.train_classifier(
        model, (x_train, y_train), (x_test, y_test), MOBILENET_EPOCHS, 3e-3
    )
    print(
        f"mobilenet digits: trained {MOBILENET_EPOCHS} epochs in "
        f"{seconds:.1f} s, torch FP32 top-1 {top1:.2%}",
        file=sys.stderr,
    )
    reference_models._export(model, torch.from_numpy(x_test[:2]), path, "image", "logits")
    reference_models._check_ort(path, model, torch.from_numpy(x_test[:8]))
    return path


def splits(folder: Path) -> dict[str, Path]:
    """The digits split as files: train/test inputs (.npz, input 'image') and labels (.npy)."""
    files = {
        k: folder / f"digits-{k}{'.npz' if k.startswith('x') else '.npy'}"
        for k in ("x_train", "x_test", "y_train", "y_test")
    }
    if not all(p.exists() for p in files.values()):
        folder.mkdir(parents=True, exist_ok=True)
        x_train, x_test, y_train, y_test = reference_models._digits_arrays()
        np.savez(files["x_train"], image=x_train.astype(np.float32))
        np.savez(files["x_test"], image=x_test.astype(np.float32))
        np.save(files["y_train"], y_train)
        np.save(files["y_test"], y_test)
    return files


def model_path(name: str, folder: Path) -> Path:
    if name == "mobilenet":
        return mobilenet_digits(folder)
    return reference_models.digits_cnn(folder)[0]


def run_model(name: str, args: argparse.Namespace, files: dict[str, Path]) -> dict:
    path = model_path(name, args.folder)
    info = inspect_model(path)
    data = NpzDataset(files["x_test"], info.inputs, batch_size=args.batch)
    qat = {
        "train_path": str(files["x_train"]),
        "train_labels_path": str(files["y_train"]),
        "epochs": args.epochs,
    }
    spec = OptimizeSpec(
        recipes=PTQ + ["qat"],
        target_backend="onnxruntime",
        task="none",
        budget={"min_cosine": 0.0, "max_top1_drop": 0.01},
        pass_settings={"qat": qat},
        comparison=ComparisonSpec(
            min_pairs=30, min_seconds=args.seconds, max_seconds=10 * args.seconds
        ),
    )
    t0 = time.perf_counter()
    report = optimize(
        path, spec, out_dir=args.folder / f"qat-run-{name}", data=data, labels_file=files["y_test"]
    )
    return {"model": name, "seconds": time.perf_counter() - t0, "report": report}


def _row(variant, fp32_top1: float) -> str:
    acc = variant.accuracy
    if variant.status != "made" or acc is None:
        return f"| {variant.recipe.name} | failed: {variant.error.message if variant.error else '?'} | | | |"
    top1 = acc.top1_accuracy_candidate or 0.0
    qat = next((s.details for s in variant.steps if s.step == "qat"), None)
    train = (
        f"{qat['training_seconds']:.0f} s, {qat['epochs_run']} epochs (best {qat['best_epoch']})"
        if qat
        else "-"
    )
    speed = (
        f"{variant.speedup:.2f}x [{1 / variant.ratio_high:.2f}, {1 / variant.ratio_low:.2f}]"
        if variant.ratio
        else "-"
    )
    return f"| {variant.recipe.name} | {top1:.2%} | {100 * (fp32_top1 - top1):+.2f} | {speed} | {train} |"


def table(result: dict) -> str:
    report = result["report"]
    made = [v for v in report.variants if v.accuracy is not None]
    fp32 = made[0].accuracy.top1_accuracy_reference if made else 0.0
    lines = [
        f"**{result['model']}**: FP32 top-1 {fp32:.2%} on {made[0].accuracy.samples if made else 0} held-out digits; run {result['seconds']:.0f} s",
        "",
        "| variant | top-1 | drop (points) | speed vs FP32 (95 % CI) | training |",
        "| --- | --- | --- | --- | --- |",
    ]
    return "\n".join(lines + [_row(v, fp32) for v in report.variants])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mobilenet,cnn")
    parser.add_argument("--seconds", type=float, default=3.0, help="timing per variant")
    parser.add_argument("--epochs", type=int, default=8, help="QAT epochs at most")
    parser.add_argument("--batch", type=int, default=32, help="evaluation and timing batch")
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--json", type=Path, help="also write the reports here")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=1,
        help="torch threads for training (1: steady on a shared machine)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    warnings.filterwarnings("ignore")
    torch = reference_models._torch()
    torch.set_num_threads(args.torch_threads)  # training; ONNX Runtime's timing keeps its own
    files = splits(args.folder)
    env = fingerprint()
    flags = ", ".join(env.get("isa_flags", []))
    print(
        f"CPU: {env.get('cpu_model')}, {env.get('logical_cores')} logical cores, flags {flags}; "
        f"onnxruntime {env.get('libraries', {}).get('onnxruntime')}\n"
    )
    results = [run_model(name, args, files) for name in args.models.split(",")]
    for result in results:
        print(table(result), end="\n\n")
        for note in result["report"].notes:
            print(f"- {note}")
        print()
    if args.json:
        args.json.write_text(
            json.dumps([r["report"].model_dump(mode="json") for r in results], indent=1)
        )


if __name__ == "__main__":
    main()
