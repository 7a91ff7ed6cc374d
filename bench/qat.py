"""Quantization-aware training against post-training INT8, on CNNs trained here on digits.

Models (trained in code, seeded, on scikit-learn's digits upsampled to 32x32; 75/25 stratified
split: 1347 training images, 450 held-out test images with labels):
  mobilenet  depthwise-separable CNN in MobileNet's style: a 3x3 stem, then four blocks of a
             depthwise 3x3 + BN + ReLU6 and a pointwise 1x1 + BN + ReLU6, global average
             pooling, a Linear head (the kind of model post-training INT8 is said to hurt;
             on this one ONNX Runtime's static INT8 loses nothing, see docs/BENCHMARKS.md)
  cnn        the plain 3-block CNN of bench/reference_models.py (Conv-BN-ReLU-MaxPool x3)
  dscnn_std  the mobilenet layout with BN + plain ReLU (a DS-CNN as in MLPerf Tiny), whose
             first layer standardizes each pixel with the training images' mean and std
             (scikit-learn's StandardScaler habit, baked into the model; std 0 -> 1). Pixels
             almost never inked in training get tiny stds, so the input is heavy-tailed (up to
             37 on the training images, 85-234 on three test images, against a std of ~1.3):
             MinMax ranges then leave the bulk of the inputs a few INT8 levels, and the ReLUs
             carry the outliers on (see docs/BENCHMARKS.md)

Each trained module's state_dict is kept beside its ONNX file (digits-<name>.state.pt);
torch_model(name, folder) rebuilds it, for torch-side anchors such as NNCF's QAT.

For each model one `optimize` run (optistudio.core.optimize.run) on ONNX Runtime with the
post-training INT8 recipes the project offers (static MinMax, MSE, Percentile, and the
accuracy-aware mixed precision) and `qat` (trained on the training split with its labels; the
test split is never trained on). The post-training recipes calibrate on the training images
too (optimize's `calibration`), so no recipe sees the images that judge it; a second run of
the three static ones calibrates on the test images, as a run given one dataset does, and its
drop is printed beside. Every variant gets the run's accuracy report on the 450 test images
(top-1 against the labels) and its interleaved timing against FP32 (speedup with a 95 %
interval); QAT's training time and epochs come from its pass report, and QAT is timed against
static INT8 directly too (interleaved). The anchor: NNCF's own QAT flow (bench/qat_nncf.py) on
the same trained torch module, deployed as OpenVINO IR.

Target (issue 20): QAT within 1 point of FP32 top-1 where post-training INT8 loses 3 or more,
at the speed of static INT8.

Run: .venv/bin/python bench/qat.py [--models dscnn_std,mobilenet,cnn] [--seconds 3] [--epochs 8]
     [--no-nncf] [--json F]   (needs the qat extra, pip install -e '.[qat]': torch 2.13, NNCF,
     scikit-learn; NNCF compiles its CPU extension on first use, about 2 minutes)
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
from optistudio.core.measure.compare import ComparisonSpec, compare_models  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.optimize.run import OptimizeSpec, optimize  # noqa: E402

FOLDER = REPO / "data" / "bench-models"
PTQ = ["int8_static", "int8_static_mse", "int8_static_percentile", "int8_mixed"]
MOBILENET_EPOCHS = 12
DSCNN_STD_EPOCHS = 16
TRAINING = {"mobilenet": (MOBILENET_EPOCHS, 3e-3), "dscnn_std": (DSCNN_STD_EPOCHS, 2e-3)}
MODELS = ("dscnn_std", "mobilenet", "cnn")


def _mobilenet_module(activation: str = "ReLU6"):
    """MobileNet-style layout: 3x3 stem, four depthwise-separable blocks, pooling, Linear."""
    torch = reference_models._torch()
    nn = torch.nn
    act = getattr(nn, activation)

    def conv(cin: int, cout: int, k: int, stride: int, groups: int = 1) -> list:
        return [
            nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
            nn.BatchNorm2d(cout),
            act(),
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


def _standardize_module(x_train: np.ndarray | None):
    """Per-pixel (x - mean) / std with the training images' statistics, as scikit-learn's
    StandardScaler does (a constant pixel keeps std 1); None: placeholders for load_state_dict."""
    torch = reference_models._torch()

    class Standardize(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            shape = (1, 1, reference_models.DIGITS_SIZE, reference_models.DIGITS_SIZE)
            mean, std = torch.zeros(shape), torch.ones(shape)
            if x_train is not None:
                x = torch.from_numpy(x_train)
                mean, std = x.mean(0, keepdim=True), x.std(0, unbiased=False, keepdim=True)
                std = torch.where(std == 0, torch.ones_like(std), std)
            self.register_buffer("mean", mean)
            self.register_buffer("std", std)

        def forward(self, x):
            return (x - self.mean) / self.std

    return Standardize()


def _module(name: str, x_train: np.ndarray | None = None):
    """The untrained module of a model name (x_train: the statistics dscnn_std bakes in)."""
    torch = reference_models._torch()
    if name == "mobilenet":
        return _mobilenet_module()
    if name == "dscnn_std":
        return torch.nn.Sequential(_standardize_module(x_train), *_mobilenet_module("ReLU"))
    if name == "cnn":
        return reference_models._digits_module()
    raise SystemExit(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def _state_path(name: str, folder: Path) -> Path:
    if name == "cnn":
        return reference_models.digits_cnn_state(folder)
    return folder / f"digits-{name}.state.pt"


def trained_digits(name: str, folder: Path) -> Path:
    """Train (seeded) and export one of TRAINING's models, keeping its state_dict beside it."""
    path, state = folder / f"digits-{name}.onnx", _state_path(name, folder)
    if path.exists() and state.exists():
        return path
    torch = reference_models._torch()
    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(reference_models.SEED)
    x_train, x_test, y_train, y_test = reference_models._digits_arrays()
    model = _module(name, x_train)
    epochs, lr = TRAINING[name]
    seconds, top1 = reference_models.train_classifier(
        model, (x_train, y_train), (x_test, y_test), epochs, lr
    )
    print(
        f"{name} digits: trained {epochs} epochs in {seconds:.1f} s, torch FP32 top-1 {top1:.2%}",
        file=sys.stderr,
    )
    reference_models._export(model, torch.from_numpy(x_test[:2]), path, "image", "logits")
    reference_models._check_ort(path, model, torch.from_numpy(x_test[:8]))
    torch.save(model.state_dict(), state)
    return path


def mobilenet_digits(folder: Path) -> Path:
    """Train (seeded) and export the MobileNet-style digits CNN."""
    return trained_digits("mobilenet", folder)


def torch_model(name: str, folder: Path = FOLDER):
    """The trained FP32 torch module behind digits-<name>.onnx (trained first if missing), in
    eval mode: the same weights the ONNX model has, for torch-side QAT anchors."""
    torch = reference_models._torch()
    model_path(name, folder)
    model = _module(name)
    model.load_state_dict(torch.load(_state_path(name, folder), weights_only=True))
    return model.eval()


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
    """The ONNX file of a model name, trained and exported first when missing."""
    if name == "cnn":
        return reference_models.digits_cnn(folder)[0]
    _module(name)  # refuses unknown names before any training
    return trained_digits(name, folder)


def _spec(recipes: list[str], args: argparse.Namespace, seconds: float, qat: dict | None = None):
    return OptimizeSpec(
        recipes=recipes,
        target_backend="onnxruntime",
        task="none",
        budget={"min_cosine": 0.0, "max_top1_drop": 0.01},
        pass_settings={"qat": qat} if qat else {},
        comparison=ComparisonSpec(min_pairs=30, min_seconds=seconds, max_seconds=10 * seconds),
    )


def run_model(name: str, args: argparse.Namespace, files: dict[str, Path]) -> dict:
    """One optimize run with every recipe, the post-training ones calibrated on the training
    images; one more of the static ones calibrated on the test images (what a run given one
    dataset does); QAT against static INT8 directly; NNCF's QAT flow (`--no-nncf` skips it)."""
    path = model_path(name, args.folder)
    info = inspect_model(path)
    data = NpzDataset(files["x_test"], info.inputs, batch_size=args.batch)
    train = NpzDataset(files["x_train"], info.inputs, batch_size=args.batch)
    qat = {
        "train_path": str(files["x_train"]),
        "train_labels_path": str(files["y_train"]),
        "epochs": args.epochs,
    }
    out = args.folder / f"qat-run-{name}"
    t0 = time.perf_counter()
    report = optimize(
        path,
        _spec(PTQ + ["qat"], args, args.seconds, qat),
        out_dir=out,
        data=data,
        labels_file=files["y_test"],
        calibration=train,
    )
    seconds = time.perf_counter() - t0
    on_test = optimize(
        path,
        _spec(PTQ[:3], args, args.seconds / 3),
        out_dir=out / "calibrated-on-test",
        data=data,
        labels_file=files["y_test"],
    )
    result = {"model": name, "seconds": seconds, "report": report, "on_test": on_test}
    result["qat_vs_static"] = qat_against_static(report, files, args)
    if args.nncf:
        from qat_nncf import nncf_qat_anchor

        x_train, x_test, y_train, y_test = reference_models._digits_arrays()
        result["nncf"] = nncf_qat_anchor(
            torch_model(name, args.folder),
            x_train,
            y_train,
            x_test,
            y_test,
            epochs=args.epochs,
            batch=args.batch,
            seconds=args.seconds,
            folder=out / "nncf",
        )
    return result


def qat_against_static(report, files: dict[str, Path], args: argparse.Namespace) -> dict | None:
    """The QAT variant against the static INT8 (MinMax) variant in interleaved pairs on ONNX
    Runtime: 'at the speed of static INT8' measured, not inferred from the Q/DQ layout."""
    made = {v.recipe.name: v for v in report.variants if v.status == "made"}
    if "qat" not in made or "int8_static" not in made:
        return None
    spec = ComparisonSpec(
        batch_size=args.batch,
        inputs_file=str(files["x_test"]),
        min_pairs=30,
        min_seconds=args.seconds,
        max_seconds=10 * args.seconds,
    )
    found = compare_models(Path(made["int8_static"].path), Path(made["qat"].path), spec)
    return {"ratio": found.ratio, "low": found.low, "high": found.high, "verdict": found.verdict}


def _top1(variant) -> float | None:
    acc = variant.accuracy
    return None if variant.status != "made" or acc is None else acc.top1_accuracy_candidate


def _row(variant, fp32_top1: float, on_test: dict[str, float | None]) -> str:
    top1 = _top1(variant)
    if top1 is None:
        return f"| {variant.recipe.name} | failed: {variant.error.message if variant.error else '?'} | | | | |"
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
    other = on_test.get(variant.recipe.name)
    test_cal = f"{100 * (fp32_top1 - other):+.2f}" if other is not None else "-"
    return (
        f"| {variant.recipe.name} | {top1:.2%} | {100 * (fp32_top1 - top1):+.2f} | {test_cal} "
        f"| {speed} | {train} |"
    )


def table(result: dict) -> str:
    report = result["report"]
    made = [v for v in report.variants if v.accuracy is not None]
    fp32 = made[0].accuracy.top1_accuracy_reference if made else 0.0
    on_test = {v.recipe.name: _top1(v) for v in result["on_test"].variants}
    lines = [
        f"**{result['model']}**: FP32 top-1 {fp32:.2%} on {made[0].accuracy.samples if made else 0} held-out digits; run {result['seconds']:.0f} s",
        "",
        "| variant | top-1 | drop (points) | drop, calibrated on the test images | speed vs FP32 (95 % CI) | training |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    lines += [_row(v, fp32, on_test) for v in report.variants]
    versus = result.get("qat_vs_static")
    if versus:
        lines += [
            "",
            f"QAT / static INT8 time, interleaved on ONNX Runtime: {versus['ratio']:.3f} "
            f"[{versus['low']:.3f}, {versus['high']:.3f}] ({versus['verdict']}).",
        ]
    nncf = result.get("nncf")
    if nncf:
        lines += ["", nncf_line(nncf)]
    return "\n".join(lines)


def nncf_line(nncf: dict) -> str:
    """NNCF's anchor in one paragraph (OpenVINO CPU, its own interleaved timing)."""
    speed = nncf["speed"]
    parts = [
        f"NNCF anchor (OpenVINO IR, OpenVINO CPU): FP32 {nncf['fp32_top1']:.2%}, "
        f"NNCF PTQ {nncf['ptq_top1']:.2%}, NNCF QAT {nncf['qat_top1']:.2%} "
        f"({nncf['training_seconds']:.0f} s, {nncf['epochs_run']} epochs, best {nncf['best_epoch']})",
    ]
    for name in ("ptq", "qat"):
        if name in speed:
            found = speed[name]
            parts.append(
                f"{name.upper()} speed vs FP32 {found['speedup']:.2f}x "
                f"[{found['speedup_low']:.2f}, {found['speedup_high']:.2f}]"
            )
    if nncf.get("onnx_qdq_top1") is not None:
        parts.append(f"its ONNX QDQ export on ONNX Runtime {nncf['onnx_qdq_top1']:.2%}")
    return "; ".join(parts) + "." + "".join(f" {note}" for note in nncf.get("notes", []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--seconds", type=float, default=3.0, help="timing per variant")
    parser.add_argument("--epochs", type=int, default=8, help="QAT epochs at most")
    parser.add_argument("--batch", type=int, default=32, help="evaluation and timing batch")
    parser.add_argument("--folder", type=Path, default=FOLDER)
    parser.add_argument("--json", type=Path, help="also write the reports here")
    parser.add_argument(
        "--no-nncf", dest="nncf", action="store_false", help="leave NNCF's QAT anchor out"
    )
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
            json.dumps(
                [
                    {
                        "model": r["model"],
                        "report": r["report"].model_dump(mode="json"),
                        "calibrated_on_test": r["on_test"].model_dump(mode="json"),
                        "qat_vs_static": r["qat_vs_static"],
                        "nncf": r.get("nncf"),
                    }
                    for r in results
                ],
                indent=1,
                default=str,
            )
        )


if __name__ == "__main__":
    main()
