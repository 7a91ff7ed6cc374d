"""Is INT8 of the PP-OCRv4 text detector broken on OpenVINO, or is cosine the wrong judge?

bench/quantization.py scored our int8_nncf variant of the detector at cosine 0.11 against FP32
on rendered pages. The detector outputs a probability map that is ~0 on most pixels, so a low
cosine could be background noise while the text regions agree, or a truly broken map. This
probe answers with the task's own numbers, on the pages bench/quantization.py renders
(reference_models.rapidocr_det: same model, pages, normalisation; calibration = the pages):

  cos       mean (min) cosine of the flattened maps, per page, as core.numerics.accuracy does
  IoU@0.3   IoU of the maps binarised at 0.3 (PP-OCR's DB threshold), all pages pooled
  regions   8-connected text regions of the binarised map: found / FP32's; matched = FP32's
            regions that a candidate region overlaps with IoU >= 0.5
  >0.3      share of pixels above 0.3; map on text / background = the candidate's mean map on
            FP32's text pixels (> 0.3) and on the rest (a broken map shows it here)
  speed     median latency ratio FP32 / variant on the same backend, interleaved, batch 1

Variants: FP32 on OpenVINO (control); int8_nncf as the pass made it before its fix
(nncf.quantize on the opset-12 ONNX model: weights per tensor) and as it makes it now (opset
13: per channel), each run on OpenVINO the way our backend loaded ONNX before its fix
(Core.read_model) and the way it does now (ov.convert_model), and on ONNX Runtime;
nncf.quantize on the OpenVINO model (ov.convert_model) with the same pages; ONNX Runtime static
INT8 (our int8_static pass) on both runtimes. The first int8_nncf row is bench/quantization.py's
0.11.

Run: .venv/bin/python bench/det_int8_probe.py [--size 320] [--pages 16] [--threads 1]
     [--rounds 15] (rounds 0: no timing)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import logging
import os
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

os.environ.setdefault("NNCF_CI", "1")  # no telemetry
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import reference_models  # noqa: E402

from optistudio.core.backends import get_backend  # noqa: E402
from optistudio.core.backends.base import SessionOptions  # noqa: E402
from optistudio.core.backends.openvino_backend import runtime_message  # noqa: E402
from optistudio.core.data.datasets import NpzDataset  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.passes.base import PassContext, passes  # noqa: E402

THRESH = 0.3  # PP-OCR's DBPostProcess thresh
MATCH_IOU = 0.5
WORK = reference_models.DEFAULT_FOLDER / "det-int8-probe"
Run = Callable[[np.ndarray], np.ndarray]


@dataclass
class Variant:
    """A model on a runtime: how to make it, and how to run one page through it."""

    name: str
    backend: str  # the FP32 it is timed against: "openvino" or "onnxruntime"
    run: Run | None = None
    error: str | None = None


# --------------------------------------------------------------------------- runtimes


def ort_runner(path: Path, threads: int) -> Run:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3  # not ORT's notes on the quantized files' unused constants
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return lambda page: session.run(None, {name: page})[0]


def backend_runner(path: Path, threads: int) -> Run:
    """Our OpenVINO backend, as the accuracy check and the timing use it."""
    loaded = get_backend("openvino").load(path, SessionOptions(threads=threads))
    return lambda page: loaded.run({"x": page})[0]


def compiled_runner(model, threads: int) -> Run:
    """OpenVINO compiling `model`: a path (Core.read_model) or an ov.Model."""
    import openvino as ov

    core = ov.Core()
    source = core.read_model(str(model)) if isinstance(model, Path) else model
    config = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": threads}
    compiled = core.compile_model(source, "CPU", config)
    return lambda page: compiled({0: page})[0]


# --------------------------------------------------------------------------- models


@contextlib.contextmanager
def quiet():
    """NNCF and the quantizers print progress bars and warnings; keep the table readable."""
    loggers = [logging.getLogger(), logging.getLogger("nncf")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def our_pass(name: str, model: Path, data: NpzDataset, out: Path, target: str) -> Path:
    context = PassContext(
        work_dir=out.parent / f"{name}-work", target_backend=target, calibration=data
    )
    context.work_dir.mkdir(parents=True, exist_ok=True)
    with quiet():
        return passes.get(name).run(model, out, {}, context).output


def nncf_on_onnx(model: Path, pages: np.ndarray, out: Path) -> Path:
    """nncf.quantize on the ONNX model with NNCF's defaults, as int8_nncf called it before it
    converted opset 10-12 models to 13 (so weights are per tensor here)."""
    import nncf
    import onnx

    dataset = nncf.Dataset([{"x": page[None]} for page in pages])
    with quiet():
        onnx.save(nncf.quantize(onnx.load(model), dataset, subset_size=300), out)
    return out


def nncf_on_openvino(model: Path, pages: np.ndarray):
    """nncf.quantize with NNCF's defaults on the OpenVINO model (its native backend)."""
    import nncf
    import openvino as ov

    dataset = nncf.Dataset([{"x": page[None]} for page in pages])
    with quiet():
        return nncf.quantize(ov.convert_model(str(model)), dataset, subset_size=300)


def variants(model: Path, data: NpzDataset, pages: np.ndarray, threads: int) -> list[Variant]:
    WORK.mkdir(parents=True, exist_ok=True)

    @functools.cache
    def nncf_pass() -> Path:
        return our_pass("int8_nncf", model, data, WORK / "int8_nncf.onnx", "openvino")

    @functools.cache
    def static_pass() -> Path:
        return our_pass("int8_static", model, data, WORK / "int8_static.onnx", "onnxruntime")

    @functools.cache
    def before() -> Path:
        return nncf_on_onnx(model, pages, WORK / "int8_nncf_before.onnx")

    old, new = "Core.read_model (loader before the fix)", "our backend (ov.convert_model)"
    was = "int8_nncf before the fix (opset 12: per-tensor weights)"
    now = "int8_nncf (opset 13: per-channel weights)"
    plans: list[tuple[str, str, Callable[[], Run]]] = [
        ("FP32 on OpenVINO (control)", "openvino", lambda: backend_runner(model, threads)),
        (f"{was} on OpenVINO, {old}", "openvino", lambda: compiled_runner(before(), threads)),
        (f"{was} on OpenVINO, {new}", "openvino", lambda: backend_runner(before(), threads)),
        (f"{was} on ONNX Runtime", "onnxruntime", lambda: ort_runner(before(), threads)),
        (f"{now} on OpenVINO, {old}", "openvino", lambda: compiled_runner(nncf_pass(), threads)),
        (f"{now} on OpenVINO, {new}", "openvino", lambda: backend_runner(nncf_pass(), threads)),
        (f"{now} on ONNX Runtime", "onnxruntime", lambda: ort_runner(nncf_pass(), threads)),
        (
            "nncf.quantize on the OpenVINO model (ov.convert_model), on OpenVINO",
            "openvino",
            lambda: compiled_runner(nncf_on_openvino(model, pages), threads),
        ),
        ("int8_static on ONNX Runtime", "onnxruntime", lambda: ort_runner(static_pass(), threads)),
        (
            f"int8_static on OpenVINO, {old}",
            "openvino",
            lambda: compiled_runner(static_pass(), threads),
        ),
        (
            f"int8_static on OpenVINO, {new}",
            "openvino",
            lambda: backend_runner(static_pass(), threads),
        ),
    ]
    return [load(name, backend, build) for name, backend, build in plans]


def load(name: str, backend: str, build: Callable[[], Run]) -> Variant:
    """The variant built and loaded, or the reason it could not be (a result too)."""
    try:
        return Variant(name, backend, run=build())
    except Exception as exc:
        return Variant(name, backend, error=f"{type(exc).__name__}: {runtime_message(exc)[:200]}")


# --------------------------------------------------------------------------- metrics


def regions(binary: np.ndarray) -> tuple[np.ndarray, int]:
    from scipy import ndimage

    labels, count = ndimage.label(binary, structure=np.ones((3, 3), dtype=int))
    return labels, count


def matched_regions(ref: np.ndarray, cand: np.ndarray) -> tuple[int, int, int]:
    """(FP32's regions, the candidate's, FP32's matched by a candidate region at IoU >= 0.5)."""
    ref_labels, ref_count = regions(ref)
    cand_labels, cand_count = regions(cand)
    if not ref_count or not cand_count:
        return ref_count, cand_count, 0
    pairs = ref_labels.ravel() * (cand_count + 1) + cand_labels.ravel()
    inter = np.bincount(pairs, minlength=(ref_count + 1) * (cand_count + 1))
    inter = inter.reshape(ref_count + 1, cand_count + 1)[1:, 1:]
    ref_area = np.bincount(ref_labels.ravel(), minlength=ref_count + 1)[1:, None]
    cand_area = np.bincount(cand_labels.ravel(), minlength=cand_count + 1)[None, 1:]
    iou = inter / (ref_area + cand_area - inter)
    return ref_count, cand_count, int(np.count_nonzero(iou.max(axis=1) >= MATCH_IOU))


def cosines(ref: np.ndarray, cand: np.ndarray) -> np.ndarray:
    r = ref.reshape(len(ref), -1).astype(np.float64)
    c = cand.reshape(len(cand), -1).astype(np.float64)
    return (r * c).sum(1) / (np.linalg.norm(r, axis=1) * np.linalg.norm(c, axis=1) + 1e-30)


def figures(ref: np.ndarray, cand: np.ndarray) -> dict[str, float]:
    ref_text, cand_text = ref > THRESH, cand > THRESH
    counts = np.array(
        [matched_regions(r[0], c[0]) for r, c in zip(ref_text, cand_text, strict=True)]
    )
    cos = cosines(ref, cand)
    return {
        "cos": float(cos.mean()),
        "cos_min": float(cos.min()),
        "iou": float((ref_text & cand_text).sum() / max((ref_text | cand_text).sum(), 1)),
        "ref_regions": int(counts[:, 0].sum()),
        "regions": int(counts[:, 1].sum()),
        "matched": int(counts[:, 2].sum()),
        "above": float(cand_text.mean()),
        "on_text": float(cand[ref_text].mean()),
        "on_background": float(cand[~ref_text].mean()),
    }


def speed(variant: Run, fp32: Run, page: np.ndarray, rounds: int) -> float | None:
    """Median of FP32 / variant latency over interleaved pairs (after one warm-up each)."""
    if rounds <= 0:
        return None
    variant(page), fp32(page)
    ratios = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fp32(page)
        t1 = time.perf_counter()
        variant(page)
        t2 = time.perf_counter()
        ratios.append((t1 - t0) / (t2 - t1))
    return float(np.median(ratios))


# --------------------------------------------------------------------------- output


def distribution(ref: np.ndarray) -> str:
    text = ref > THRESH
    return (
        f"FP32 map: {text.mean():.1%} of pixels > {THRESH} (mean {ref[text].mean():.3f} there), "
        f"{(ref < 0.01).mean():.1%} below 0.01, background mean {ref[~text].mean():.5f}"
    )


def row(name: str, f: dict[str, float] | None, ratio: float | None, error: str | None) -> str:
    if error is not None:
        return f"| {name} | failed: {error} | | | | | |"
    assert f is not None
    speed_text = f"{ratio:.2f}x" if ratio else "-"
    return (
        f"| {name} | {f['cos']:.4f} ({f['cos_min']:.4f}) | {f['iou']:.4f} | "
        f"{f['regions']} / {f['ref_regions']}, matched {f['matched']} | {f['above']:.4f} | "
        f"{f['on_text']:.3f} / {f['on_background']:.4f} | {speed_text} |"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=320, help="page side, x32 (bench: 320)")
    parser.add_argument("--pages", type=int, default=16, help="rendered pages (default 16)")
    parser.add_argument("--threads", type=int, default=1, help="runtime threads (default 1)")
    parser.add_argument("--rounds", type=int, default=15, help="timed pairs (0: no timing)")
    args = parser.parse_args(argv)
    import nncf
    import onnxruntime
    import openvino

    model, npz, _ = reference_models.rapidocr_det(
        reference_models.DEFAULT_FOLDER, args.size, args.pages
    )
    data = NpzDataset(npz, inspect_model(model).inputs, batch_size=1)
    pages = np.load(npz)["x"]
    print(
        f"PP-OCRv4 detector, {len(pages)} rendered pages {args.size}x{args.size}; NNCF "
        f"{nncf.__version__}, OpenVINO {openvino.__version__.split('-')[0]}, ONNX Runtime "
        f"{onnxruntime.__version__}; {args.threads} thread(s)"
    )
    reference = ort_runner(model, args.threads)
    ref = np.concatenate([reference(page[None]) for page in pages])
    print(distribution(ref))
    fp32 = {"onnxruntime": reference, "openvino": backend_runner(model, args.threads)}
    print(
        "\n| variant (vs FP32 on ONNX Runtime) | cos mean (min) | IoU@0.3 | regions found / "
        "FP32's | >0.3 | map on text / background | speed vs FP32, same backend |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for variant in variants(model, data, pages, args.threads):
        if variant.run is None:
            print(row(variant.name, None, None, variant.error), flush=True)
            continue
        maps = np.concatenate([variant.run(page[None]) for page in pages])
        ratio = speed(variant.run, fp32[variant.backend], pages[:1], args.rounds)
        print(row(variant.name, figures(ref, maps), ratio, None), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
