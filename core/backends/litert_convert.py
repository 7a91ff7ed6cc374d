"""ONNX -> LiteRT (.tflite) through onnx2tf and TensorFlow's TFLite converter, in a subprocess.

onnx2tf rebuilds the ONNX graph as a Keras model; TensorFlow's `TFLiteConverter` then writes one
.tflite per precision from that model's concrete function:

- fp32: the graph as it is;
- fp16: weights stored in float16 (XNNPACK on x86 computes in float32 after dequantizing them);
- int8_dynamic: weights in int8, activations quantized at run time (dynamic range);
- int8: weights and activations in int8 ("full integer", TFLITE_BUILTINS_INT8), with the
  activation ranges calibrated on the user's data (the same batches the INT8 ONNX passes read);
  inputs and outputs stay float32, so the file is fed what the ONNX model is fed.

Surprises worth knowing:
- onnx2tf turns NCHW into NHWC. We keep every 3-5-D input in the ONNX layout
  (keep_ncw_or_nchw_or_ncdhw_input_names), so feeds and calibration data need no transposing.
- Only LiteRT's built-in ops are allowed: a graph that needs TensorFlow ("Flex") ops fails with
  the converter's reason instead of making a file the interpreter here cannot run.
- TensorFlow is about 1.3 GB and starts in seconds: the conversion runs in a child process
  (`python -m optistudio.core.backends.litert_convert REQUEST.json`), so the caller never imports
  it, a converter crash is a failed conversion, and its memory is returned at the end.
- Converted files are cached by the ONNX file's content, the precision and the calibration data
  (`cached_conversion`), so loading one ONNX model on `litert` twice converts it once.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

import numpy as np

from optistudio.core.data.npy_headers import array_budget, checked_npz_headers
from optistudio.core.errors import BackendUnavailable, PassFailed

log = logging.getLogger(__name__)

LiteRtPrecision = Literal["fp32", "fp16", "int8_dynamic", "int8"]
PRECISIONS: tuple[LiteRtPrecision, ...] = ("fp32", "fp16", "int8_dynamic", "int8")
CONVERTER_PACKAGES = ("onnx2tf", "tf-keras", "onnx-graphsurgeon", "sng4onnx")
TENSORFLOW_PACKAGES = ("tensorflow", "tensorflow-cpu")
"""Either wheel provides the `tensorflow` module; the extra installs `tensorflow`."""
RUNTIME_PACKAGE = "ai-edge-litert"
INSTALL_HINT = "pip install 'optistudio[litert]'"
CALIBRATION_SAMPLES = 128
"""Samples of the user's data kept for the INT8 activation ranges (TFLite's own default is 100)."""
TIMEOUT_S = 900
SCOPE_REFUSED = re.compile(r"[^A-Za-z0-9_./>-]")
"""Characters a TensorFlow name scope may not hold (onnx2tf names layers after ONNX nodes)."""


def missing_converter() -> str | None:
    """Which converter package is not installed here, as a clause; None when all are."""
    missing = [name for name in CONVERTER_PACKAGES if _version(name) is None]
    if not any(_version(name) for name in TENSORFLOW_PACKAGES):
        missing.append("tensorflow")
    if not missing:
        return None
    return f"the ONNX -> LiteRT converter is not installed ({', '.join(missing)} missing)"


def converter_versions() -> dict[str, str]:
    """Versions of the converter's packages that are installed (recorded with a conversion)."""
    names = (*CONVERTER_PACKAGES, *TENSORFLOW_PACKAGES, RUNTIME_PACKAGE)
    found = {name: _version(name) for name in names}
    return {name: v for name, v in found.items() if v}


def convert(
    model: Path,
    out: Path,
    precision: LiteRtPrecision,
    *,
    calibration: Path | None = None,
    shapes: dict[str, list[int]] | None = None,
) -> dict[str, Any]:
    """Convert `model` to `out` (.tflite) in `precision`; PassFailed with the reason if it can't.

    `calibration` is an .npz of input name -> samples (needed for int8); `shapes` fixes input
    dims the ONNX file leaves open (onnx2tf needs concrete sizes for everything but the batch).
    Returns what the conversion recorded (versions, seconds, bytes).
    """
    outcome = convert_many(model, {precision: out}, calibration=calibration, shapes=shapes)
    if not outcome[precision].get("ok"):
        raise PassFailed(
            f"onnx2tf / TensorFlow could not convert this model to LiteRT ({precision}): "
            f"{outcome[precision].get('error')}",
            hint="The other variants are unaffected; LiteRT has no kernel for some ONNX "
            "operators, and onnx2tf needs fixed sizes for every dim but the batch (set them "
            "with --shape).",
        )
    return {k: v for k, v in outcome[precision].items() if k != "ok"}


def convert_many(
    model: Path,
    outs: dict[LiteRtPrecision, Path],
    *,
    calibration: Path | None = None,
    shapes: dict[str, list[int]] | None = None,
) -> dict[LiteRtPrecision, dict[str, Any]]:
    """Every precision of `outs` from one onnx2tf run (one TensorFlow start): precision ->
    {"ok": True, "bytes", "seconds", "versions"} or {"ok": False, "error": one sentence}.

    Only a missing converter raises (BackendUnavailable): a model it cannot convert is an answer.
    """
    missing = missing_converter()
    if missing:
        raise BackendUnavailable(f"Cannot convert to LiteRT: {missing}.", hint=INSTALL_HINT)
    answers: dict[LiteRtPrecision, dict[str, Any]] = {}
    if "int8" in outs and calibration is None:
        answers["int8"] = {
            "ok": False,
            "error": "full-integer INT8 needs calibration data (a few hundred inputs)",
        }
    todo = {p: str(path) for p, path in outs.items() if p not in answers}
    if not todo:
        return answers
    folder = next(iter(outs.values())).parent
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="litert-", dir=folder) as work:
        request = {
            "model": str(model),
            "outs": todo,
            "calibration": str(calibration) if calibration else None,
            "shapes": shapes or {},
            "work": work,
        }
        request_file = Path(work) / "request.json"
        request_file.write_text(json.dumps(request))
        done = _run_child(request_file)
    answer = _answer(done)
    versions = converter_versions()
    for precision in todo:
        got = answer.get(precision) or {"ok": False, "error": answer.get("error")}
        if not got.get("error") and not got.get("ok"):
            got = {"ok": False, "error": "the converter stopped without saying why"}
        answers[precision] = got | ({"versions": versions} if got.get("ok") else {})
    return answers


def cached_conversion(
    model: Path, precision: LiteRtPrecision = "fp32", *, cache_dir: Path | None = None
) -> Path:
    """The .tflite of `model` in `precision` from the cache, converting it the first time."""
    folder = cache_dir or default_cache_dir()
    key = hashlib.sha256(Path(model).read_bytes()).hexdigest()[:20]
    versions = json.dumps(converter_versions(), sort_keys=True)
    out = folder / f"{key}-{precision}-{hashlib.sha256(versions.encode()).hexdigest()[:8]}.tflite"
    if not out.exists():
        convert(model, out, precision)
    return out


def default_cache_dir() -> Path:
    """Where converted files are kept between loads (OPTISTUDIO_LITERT_CACHE, else ~/.cache)."""
    given = os.environ.get("OPTISTUDIO_LITERT_CACHE")
    return Path(given) if given else Path.home() / ".cache" / "optistudio" / "litert"


def write_calibration(batches: Iterable[dict[str, np.ndarray]], path: Path) -> Path:
    """Up to CALIBRATION_SAMPLES samples of `batches`, one array per input, as an .npz; fewer
    when that many would pass the array budget the conversion reads them under."""
    kept: dict[str, list[np.ndarray]] = {}
    count = 0
    for batch in batches:
        for name, array in batch.items():
            kept.setdefault(name, []).append(np.asarray(array))
        count += len(next(iter(batch.values())))
        if count >= CALIBRATION_SAMPLES:
            break
    if not kept:
        raise PassFailed("The calibration data holds no samples.")
    sample_bytes = sum(parts[0][:1].nbytes for parts in kept.values())
    keep = max(1, min(CALIBRATION_SAMPLES, array_budget() // max(sample_bytes, 1)))
    arrays = {name: np.concatenate(parts)[:keep] for name, parts in kept.items()}
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _run_child(request_file: Path) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1"}
    command = [sys.executable, "-m", "optistudio.core.backends.litert_convert", str(request_file)]
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise PassFailed(
            f"The LiteRT conversion did not finish in {TIMEOUT_S} s.",
            hint="Try a smaller input size, or the other variants.",
        ) from exc


def _answer(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    for line in reversed(done.stdout.strip().splitlines()):
        if line.startswith("{"):
            answer: dict[str, Any] = json.loads(line)
            return answer
    tail = [line for line in done.stderr.strip().splitlines() if line.strip()][-3:]
    log.info("litert conversion exited %s: %s", done.returncode, done.stderr[-4000:])
    return {"ok": False, "error": f"exit code {done.returncode}: {' '.join(tail)[:400]}"}


# --- the child process: imports TensorFlow ---------------------------------------------------


def _child(request: dict[str, Any]) -> dict[str, Any]:
    import time

    import onnx

    started = time.perf_counter()
    proto = onnx.load(request["model"])
    initializers = {i.name for i in proto.graph.initializer}
    inputs = [i for i in proto.graph.input if i.name not in initializers]
    # onnx2tf reads dim_value -1 (Paddle2ONNX) as a size, and TensorFlow refuses node names
    # such as Paddle's 'Softmax@0' as scope names: both are rewritten in a copy. onnx2tf also
    # writes op names back into the file it is given, so it only ever gets that copy in the
    # work folder: a stored model's own file would no longer match its recorded hash.
    _name_open_dims(proto)
    _plain_node_names(proto)
    request = request | {"model": str(Path(request["work"]) / "prepared.onnx")}
    weights = sum(len(t.raw_data) for t in proto.graph.initializer)
    onnx.save(
        proto,
        request["model"],
        save_as_external_data=weights > _PROTO_LIMIT,
        location="prepared.onnx.data",
    )
    keras_model = _keras_model(request, inputs)
    function = _concrete_function(keras_model)
    answer: dict[str, Any] = {"ok": True, "onnx2tf_seconds": time.perf_counter() - started}
    for precision, out in request["outs"].items():
        started = time.perf_counter()
        try:
            tflite = _tflite_bytes(function, precision, request.get("calibration"), inputs)
        except Exception as exc:  # one precision failing leaves the others
            answer[precision] = {"ok": False, "error": _short(exc)}
            continue
        Path(out).write_bytes(tflite)
        seconds = round(time.perf_counter() - started, 2)
        answer[precision] = {"ok": True, "bytes": len(tflite), "seconds": seconds}
    return answer


_PROTO_LIMIT = 2**31 - 2**27
"""Weight bytes above which the copy keeps them as external data (a protobuf stops at 2 GiB)."""


def _name_open_dims(proto: Any) -> bool:
    """Give every dim stored as dim_value <= 0 a name instead; True when one was changed."""
    changed = False
    for value in [*proto.graph.input, *proto.graph.output]:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value <= 0:
                dim.dim_param = f"{value.name}_dim{axis}"
                changed = True
    return changed


def _plain_node_names(proto: Any) -> bool:
    """Replace what TensorFlow's scope names refuse in node names by '_'; True when changed."""
    changed = False
    for node in proto.graph.node:
        plain = SCOPE_REFUSED.sub("_", node.name)
        if plain != node.name:
            node.name, changed = plain, True
    return changed


def _keras_model(request: dict[str, Any], inputs: list[Any]) -> Any:
    import onnx2tf

    layout_kept = [i.name for i in inputs if 3 <= len(i.type.tensor_type.shape.dim) <= 5]
    shapes = request.get("shapes") or {}
    overwrite = [f"{name}:{','.join(str(d) for d in dims)}" for name, dims in shapes.items()]
    return onnx2tf.convert(
        input_onnx_file_path=request["model"],
        output_folder_path=request["work"],
        not_use_onnxsim=True,
        non_verbose=True,
        disable_model_save=True,
        keep_ncw_or_nchw_or_ncdhw_input_names=layout_kept or None,
        overwrite_input_shape=overwrite or None,
    )


def _concrete_function(keras_model: Any) -> Any:
    import tensorflow as tf

    specs = [tf.TensorSpec(t.shape, t.dtype, t.name) for t in keras_model.inputs]
    function = tf.function(lambda *args: keras_model(args), input_signature=specs)
    return function.get_concrete_function()


def _tflite_bytes(
    function: Any, precision: str, calibration: str | None, inputs: list[Any]
) -> bytes:
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_concrete_functions([function])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if precision == "fp16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    elif precision == "int8_dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif precision == "int8":
        assert calibration is not None
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.representative_dataset = _representative(calibration, inputs)
    tflite: bytes = converter.convert()
    return tflite


def _representative(calibration: str, inputs: list[Any]) -> Any:
    """TFLite's representative dataset: one sample of each input at a time. The headers are
    held against the array budget first (write_calibration keeps under it), then each array
    is loaded once."""
    headers = checked_npz_headers(Path(calibration), "The calibration data")
    names = [i.name for i in inputs]
    missing = [name for name in names if name not in headers]
    if missing:
        raise ValueError(f"the calibration data has no input {', '.join(missing)}")
    with np.load(calibration, allow_pickle=False) as npz:
        data = {name: npz[name] for name in names}
    count = min(len(data[name]) for name in names)

    def samples() -> Any:
        for index in range(count):
            yield [data[name][index : index + 1].astype(np.float32) for name in names]

    return samples


def main(argv: list[str]) -> int:
    """Child entry point: convert what REQUEST.json asks, print one JSON line with the outcome."""
    request = json.loads(Path(argv[1]).read_text())
    try:
        answer = _child(request)
    except SystemExit as exc:  # onnx2tf calls sys.exit(1) after logging an unsupported case
        answer = {"ok": False, "error": f"onnx2tf gave up (exit {exc.code})"}
    except Exception as exc:  # the converter's own errors, reported to the parent as text
        answer = {"ok": False, "error": _short(exc)}
    sys.stdout.write("\n" + json.dumps(answer) + "\n")
    return 0


def _short(exc: BaseException) -> str:
    """'ValueError: axes don't match array': the error's kind before its words, so the
    parent's sentence can name it when the words alone are bare (core.report.litert)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if "error:" in line.lower()] or lines
    text = " ".join(useful[:3])
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__)[:400]


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
