"""A deployable zip bundle for one model or variant, written streaming to disk.

Contents: the model file(s), the recipe spec that reproduces it (its command with the input
flags the variant ran at), accuracy and benchmark reports, `pipeline.json` (schema v1,
`optistudio.core.batching.pipeline_file`; long symbolic dims as short placeholders, their text
under "symbolic_dims"), a Triton model repository
(`triton/<name>/config.pbtxt`, `triton/<name>/1/`; served by the backend the variant is made
for: ONNX Runtime, or OpenVINO for an OpenVINO variant, with its HINT_BF16 and threads),
OpenVINO IR (`openvino/<name>.xml` + `.bin`, and `run.py` compiling it with
`compile_config.json`: the precision hint and threads the variant was measured at), Core ML packages (`coreml/<name>_<precision>.mlpackage/`,
made here, run on macOS / iOS only), for a decoder with a KV cache the folder ONNX Runtime
GenAI loads as it is (`genai/`: the graph, genai_config.json, the tokenizer; core.report.genai),
`manifest.json` (its "runs_as": backend, precision and threads, `core.report.run_settings`) and
`SHA256SUMS` (every other member's SHA-256, checkable with `sha256sum -c`).
The Triton config batches with the serving setting chosen by
`optistudio.core.batching.serving_choice` (the newest verified, else a stored recommendation,
else the profile's ceiling, else a free batch's default: never the benchmark's batch), named in
the manifest's "serving"; a model whose batch cannot be batched (fixed, and its rewrite refused;
or no batch dim at all) is served as it is, `max_batch_size: 0` on the setting's instances.
A part that cannot be built (a TensorRT engine needs a TensorRT worker, a run on ONNX Runtime's
CANN provider needs an Ascend machine) is listed in the manifest's `skipped` with the reason,
never faked. A variant that exists only as OpenVINO IR (NNCF's INT8 on the OpenVINO model) has
no ONNX parts: its IR goes into openvino/ and the Triton repository, each part made from ONNX
says so in one sentence (core.report.openvino_ir).

Files are copied into the zip in chunks while their hash is taken, so a big model is never held
in memory; the zip is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import onnx
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from optistudio.core.backends.onnxruntime_backend import CANN_MISSING
from optistudio.core.batching.applicability import batch_dim_problem
from optistudio.core.batching.fixed_batch import BatchRefused, batchable, fixed_at_one
from optistudio.core.batching.pipeline_file import pipeline_text
from optistudio.core.batching.serving_choice import choose_serving, triton_batching
from optistudio.core.batching.triton import parameters_block, triton_config
from optistudio.core.errors import InvalidSpec, OptistudioError
from optistudio.core.model.declared_sizes import model_tensors
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.progress import ProgressCallback
from optistudio.core.report import coreml, openvino_ir
from optistudio.core.report import genai as genai_part
from optistudio.core.report import litert as litert_part
from optistudio.core.report.litert_tensors import tflite_tensors
from optistudio.core.report.run_settings import (
    RunSettings,
    manifest_entry,
    run_settings,
    triton_parameters,
)
from optistudio.core.report.symbolic_dims import SymbolicDims

CHUNK = 1 << 20
TENSORRT_SKIPPED = (
    "No TensorRT engine: engines are built for one GPU by a TensorRT worker, and none is "
    "available here. Build it on the serving GPU from the .onnx in model/ with `trtexec --onnx=...`."
)
CANN_SKIPPED = (
    f"Not checked on CANN: ONNX Runtime's CANN provider {CANN_MISSING} here. On an Ascend "
    "machine the .onnx in model/ runs as it is (`optistudio bench MODEL --device npu:0`)."
)


@dataclass
class BundleSource:
    """What goes into a bundle; the caller (CLI, worker) gathers it from the database."""

    name: str
    model_path: Path
    info: ModelInfo
    precision: str = "fp32"
    recipe: dict[str, Any] | None = None
    reproduce: dict[str, Any] = field(default_factory=dict)
    accuracy: dict[str, Any] | None = None
    benchmarks: list[dict[str, Any]] = field(default_factory=list)
    preprocessing: dict[str, Any] | None = None
    batch_sizes: list[int] = field(default_factory=list)
    tensorrt_note: str = TENSORRT_SKIPPED
    cann_note: str | None = CANN_SKIPPED
    """Why the bundle was not checked on ONNX Runtime's CANN provider; None leaves it out."""
    input_profile: dict[str, Any] | None = None
    """The shapes and values the model was measured at (its input profile), for the server."""
    coreml_precisions: list[str] = field(default_factory=lambda: list(coreml.PRECISIONS))
    """Core ML packages to make (empty: none, listed as skipped)."""
    litert_precisions: list[str] = field(default_factory=list)
    """LiteRT files to make (litert_part.PRECISIONS for an export; empty: listed as skipped)."""
    serving: dict[str, Any] | None = None
    """The batching setting to serve (`serving_choice.choose_serving`'s dict: `BatchingSettings`
    as JSON with its "source", "job" and "note"): the Triton config's dynamic batcher and
    instance_group count, pipeline.json's "serving" and the manifest take it. None: a free
    batch's default, said as such (never the benchmark's batch sizes)."""
    backend: str | None = None
    """The backend the stored variant runs on (its row's); None: its recipe's, else its run's
    target (`runs_as`)."""
    threads: int | None = None
    """Intra-op threads the variant was measured at; None: the runtime's default."""


@dataclass
class BundleReport:
    path: Path
    files: dict[str, str]
    """Member -> SHA-256."""
    skipped: dict[str, str]
    """Part -> why it is not in the bundle."""


def safe_name(name: str) -> str:
    """A Triton-valid model name from a display name ('tiny · int8' -> 'tiny_int8')."""
    cleaned = re.sub(r"[^A-Za-z0-9_.\-]+", "_", name).strip("_.-")
    return cleaned[:64] or "model"


def model_files(model_path: Path, info: ModelInfo) -> list[Path]:
    """The .onnx file and the external data files it names (read without loading weights); an
    OpenVINO IR's .xml and .bin."""
    if openvino_ir.is_ir(model_path):
        return [model_path, model_path.with_suffix(".bin")]
    if not info.external_data:
        return [model_path]
    proto = onnx.load(str(model_path), load_external_data=False)
    locations = sorted(
        {ExternalDataInfo(t).location for t in model_tensors(proto) if uses_external_data(t)}
    )
    folder = model_path.parent.resolve()
    files = [(folder / location).resolve() for location in locations]
    outside = [str(f) for f in files if not f.is_relative_to(folder)]
    if outside:
        raise InvalidSpec(f"External data outside the model's folder: {', '.join(outside)}.")
    return [model_path, *files]


class _Writer:
    """Adds members to an open zip while hashing them; remembers every member's digest, and
    which format was made from the model at the job's static shapes, and why (the manifest's
    "static_shapes": the dynamic graph did not convert)."""

    def __init__(self, archive: zipfile.ZipFile) -> None:
        self.archive = archive
        self.digests: dict[str, str] = {}
        self.static_shapes: dict[str, str] = {}

    def add_file(self, arcname: str, path: Path) -> None:
        digest = hashlib.sha256()
        with path.open("rb") as source, self._open(arcname) as target:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                target.write(chunk)
        self.digests[arcname] = digest.hexdigest()

    def add_text(self, arcname: str, text: str) -> None:
        data = text.encode()
        with self._open(arcname, compress=True) as target:
            target.write(data)
        self.digests[arcname] = hashlib.sha256(data).hexdigest()

    def add_json(self, arcname: str, data: Any) -> None:
        self.add_text(arcname, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")

    def _open(self, arcname: str, *, compress: bool = False) -> IO[bytes]:
        """Model files are stored as they are (weights barely compress); text is deflated."""
        info = zipfile.ZipInfo(arcname, date_time=(2020, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
        info.external_attr = FILE_MODE << 16  # unzipped files readable by the serving user
        return self.archive.open(info, "w", force_zip64=True)


FILE_MODE = 0o644
"""rw-r--r--: a bundle unzipped by one user is served by another (zip's default is 0600)."""


def write_bundle(
    source: BundleSource,
    out: Path,
    *,
    progress: ProgressCallback | None = None,
) -> BundleReport:
    """Write the bundle to `out` (atomically); returns its members' digests and skipped parts."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    skipped: dict[str, str] = {}
    try:
        with zipfile.ZipFile(partial, "w") as z:
            writer = _Writer(z)
            for fraction, step in _steps(source, writer, skipped):
                if progress:
                    progress(fraction, step)
            _write_manifest(source, writer, skipped)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return BundleReport(path=out, files=writer.digests, skipped=skipped)


def _steps(
    source: BundleSource, writer: _Writer, skipped: dict[str, str]
) -> Iterator[tuple[float, str]]:
    name = safe_name(source.name)
    yield 0.0, "Copying the model"
    if openvino_ir.is_ir(source.model_path):  # no ONNX file: its parts say so, made from none
        skipped.update(openvino_ir.left_out(name))
    else:
        _copy_model(source, writer)
    yield 0.3, "Writing the recipe and reports"
    writer.add_json("recipe.json", _recipe(source))
    writer.add_json("reports/accuracy.json", source.accuracy or _reference_accuracy(source))
    writer.add_json("reports/benchmark.json", source.benchmarks)
    yield 0.4, "Laying out the Triton model repository"
    triton_served = _triton(source, name, writer, skipped)
    yield 0.5, "Converting to OpenVINO IR"
    openvino_ir.add_openvino(source.model_path, runs_as(source), name, writer, skipped)
    yield 0.7, "Converting to Core ML"
    parts: dict[str, Any] = {"coreml": _coreml(source, name, writer, skipped)}
    yield 0.85, "Converting to LiteRT"
    parts["litert"] = _litert(source, name, writer, skipped)
    if triton_served:
        parts["triton_served"] = triton_served  # a batch fixed at 1: the rewrite, or as it is
    if (genai := genai_part.add_genai(source.model_path, writer, skipped)) is not None:
        parts["genai"] = genai  # a decoder: the folder ONNX Runtime GenAI loads as it is
    writer.add_text("pipeline.json", pipeline_text(pipeline(source, name, parts)))
    if not openvino_ir.is_ir(source.model_path):
        skipped["tensorrt"] = source.tensorrt_note
        if source.cann_note:
            skipped["cann"] = source.cann_note
    yield 1.0, "Bundle written"


def _copy_model(source: BundleSource, writer: _Writer) -> None:
    """model/: the .onnx file and its external data, as stored."""
    folder = source.model_path.parent.resolve()
    for path in model_files(source.model_path, source.info):
        writer.add_file(f"model/{path.resolve().relative_to(folder)}", path)


def _recipe(source: BundleSource) -> dict[str, Any]:
    """recipe.json: the recipe, and how to make the variant again at the inputs it ran at."""
    reproduce = dict(source.reproduce)
    if reproduce.get("command"):
        fed = reproduce.get("optimize_spec") or {}
        reproduce["command"] += input_flags(fed, source.input_profile)
    return {"recipe": source.recipe, "precision": source.precision, **reproduce}


def input_flags(spec: dict[str, Any], profile: dict[str, Any] | None = None) -> str:
    """' --shape x=1,3,48,320 --dim x.3=320 --value sr=16000': what the optimize job fed (its
    row records the spec with the input profile under it), else the profile's shapes; an array
    value is named with the file it would need ('--value NAME=@NAME.npz')."""
    shapes = spec.get("shapes") or (profile or {}).get("shapes") or {}
    dims = spec.get("dims") or {}
    values = spec.get("values") or (profile or {}).get("values") or {}
    flags = [
        f"--shape {_assigned(name, ','.join(map(str, shape)))}" for name, shape in shapes.items()
    ]
    flags += [f"--dim {_assigned(name, str(size))}" for name, size in dims.items()]
    flags += [f"--value {_assigned(name, _value(name, value))}" for name, value in values.items()]
    return "".join(f" {flag}" for flag in flags)


def _assigned(name: str, value: str) -> str:
    return shlex.quote(f"{name}={value}")


def _value(name: str, value: Any) -> str:
    """A number as written; an array as the .npz it is read from (arrays are not inlined)."""
    return f"@{safe_name(name)}.npz" if isinstance(value, dict) else f"{value:g}"


def served_backend(source: BundleSource) -> str:
    """The backend the model is made for (`runs_as`)."""
    return runs_as(source).backend


def runs_as(source: BundleSource) -> RunSettings:
    """Backend, precision and threads the model runs at: its row's backend, else its recipe's,
    else its optimize run's target (an original, or a run for any backend: ONNX Runtime, where
    it was measured); the inference precision its recipe asked for."""
    target = ((source.reproduce or {}).get("optimize_spec") or {}).get("target_backend")
    return run_settings(
        recipe=source.recipe,
        precision=source.precision,
        backend=source.backend,
        target=target,
        threads=source.threads,
    )


def _reference_accuracy(source: BundleSource) -> dict[str, Any]:
    if source.recipe is None:
        return {"note": "This is an original model: it is the reference, so it has no error."}
    return {"note": "No accuracy report is stored for this variant."}


TRITON_BACKENDS = {
    "onnxruntime": 'platform: "onnxruntime_onnx"',
    "openvino": 'backend: "openvino"\ndefault_model_filename: "model.onnx"',
}
"""How config.pbtxt names the Triton backend that serves a variant made for each backend (the
OpenVINO backend reads the .onnx itself); others are served by ONNX Runtime."""
RUNS_ON = {
    "model": "ONNX Runtime (CPU, CUDA, ...): the format measured here",
    "triton": "Triton Inference Server's onnxruntime backend (Linux servers)",
    "openvino": "OpenVINO Runtime (Intel CPU, GPU, NPU)",
    "coreml": f"Core ML {coreml.RUNS_ON}",
    "litert": litert_part.RUNS_ON,
}
"""Where each format of the bundle runs, for pipeline.json."""


def pipeline(
    source: BundleSource, name: str, parts: dict[str, Any] | None = None
) -> dict[str, Any]:
    """How to serve the model: its tensors, precision, preprocessing and where each format is
    and runs; `parts` adds what the format converters made (e.g. "coreml": its packages)."""
    dims = SymbolicDims()
    ir = openvino_ir.is_ir(source.model_path)
    return {
        "written_by": "bundle",
        "name": name,
        "model": f"openvino/{name}.xml" if ir else f"model/{source.model_path.name}",
        "format": openvino_ir.FORMAT if ir else "onnx",
        "precision": source.precision,
        "backend": served_backend(source),
        "opsets": source.info.opsets,
        "inputs": [_tensor(t, dims) for t in source.info.inputs],
        "outputs": [_tensor(t, dims) for t in source.info.outputs],
        "symbolic_dims": dims.legend(),
        "preprocessing": source.preprocessing,
        "measured_batch_sizes": source.batch_sizes,
        "input_profile": source.input_profile,
        "triton": f"triton/{name}",
        "openvino": f"openvino/{name}.xml",
        "runs_on": _runs_on(source),
        "serving": serving_of(source),
        **(parts or {}),
    }


def _tensor(spec: TensorSpec, dims: SymbolicDims) -> dict[str, Any]:
    """A tensor for pipeline.json: a long symbolic dim as its placeholder (see symbolic_dims,
    the full text in pipeline.json's "symbolic_dims")."""
    return spec.model_dump() | {"shape": dims.dims(spec.shape)}


def _runs_on(source: BundleSource) -> dict[str, str]:
    """Where each part runs; an IR-only variant has no ONNX parts, only OpenVINO's."""
    triton = {"triton": _triton_runs_on(served_backend(source))}
    if openvino_ir.is_ir(source.model_path):
        return {"model": openvino_ir.RUNS_ON, "openvino": RUNS_ON["openvino"]} | triton
    return RUNS_ON | triton


def _triton_runs_on(backend: str) -> str:
    served = backend if backend in TRITON_BACKENDS else "onnxruntime"
    return f"Triton Inference Server's {served} backend (Linux servers)"


def serving_of(source: BundleSource) -> dict[str, Any]:
    """The setting the bundle serves: the source's, else the default (said so in its note)."""
    if source.serving is None:
        return choose_serving()
    return {"note": "the setting the caller gave", **source.serving}


def _triton(
    source: BundleSource, name: str, writer: _Writer, skipped: dict[str, str]
) -> str | None:
    """The Triton model repository; returns how a model that cannot batch as it is gets served
    (None when it batches): a batch fixed at 1 through its checked rewrite with a free batch,
    else as it is with no batching (max_batch_size 0) on the setting's instances."""
    model_path, info, served = source.model_path, source.info, None
    batching = triton_batching(serving_of(source))
    ir = openvino_ir.is_ir(model_path)
    if ir and (problem := batch_dim_problem(info)) is not None:  # no ONNX graph to rewrite
        batching, served = _unbatched(batching, f"Dynamic batching does not apply: {problem}")
    elif fixed_at_one(info):
        try:
            freed = batchable(model_path)
            model_path, info, served = freed.path, inspect_model(freed.path), freed.note
        except BatchRefused as exc:
            batching, served = _unbatched(batching, exc.message)
    elif (problem := batch_dim_problem(info)) is not None:
        batching, served = _unbatched(batching, f"Dynamic batching does not apply: {problem}")
    try:
        config = triton_config(name, info, **batching)
    except OptistudioError as exc:
        skipped["triton"] = f"No Triton config: {exc.message}"
        return served
    writer.add_text(f"triton/{name}/config.pbtxt", _served_by(config, runs_as(source), ir=ir))
    if ir:
        openvino_ir.add_triton_files(model_path, f"triton/{name}", writer)
        return served
    folder = model_path.parent.resolve()
    for path in model_files(model_path, info):
        relative = path.resolve().relative_to(folder)
        target = "model.onnx" if path == model_path else str(relative)
        writer.add_file(f"triton/{name}/1/{target}", path)
    return served


def _unbatched(batching: dict[str, Any], why: str) -> tuple[dict[str, Any], str]:
    """Triton's "no batching" (max_batch_size 0) on the setting's instances, and the line."""
    unbatched = batching | {"max_batch_size": 0, "preferred_batch_sizes": []}
    return unbatched, (
        f"{why} Triton serves it as it is: no batching (max_batch_size 0) on "
        f"{batching.get('instances', 1)} instance(s)."
    )


def _served_by(config: str, run: RunSettings, *, ir: bool = False) -> str:
    """The config naming the Triton backend for the run's backend (ONNX Runtime's platform
    otherwise), with that backend's parameters (OpenVINO's HINT_BF16, its threads); an IR is
    served by the openvino backend from its model.xml."""
    line = TRITON_BACKENDS.get("openvino" if ir else run.backend)
    if line is None:
        return config
    if ir:
        line = line.replace("model.onnx", openvino_ir.TRITON_FILE)
    named = config.replace(TRITON_BACKENDS["onnxruntime"], line, 1)
    return named + parameters_block(triton_parameters(run))


def _coreml(
    source: BundleSource, name: str, writer: _Writer, skipped: dict[str, str]
) -> dict[str, Any]:
    """`coreml/<name>_<precision>.mlpackage/` per precision made; pipeline.json's "coreml"."""
    if openvino_ir.is_ir(source.model_path):  # nothing to convert: left_out says why
        return {"runs_on": coreml.RUNS_ON, "packages": []}
    if not source.coreml_precisions:
        skipped["coreml"] = "No Core ML package was asked for."
        return {"runs_on": coreml.RUNS_ON, "packages": []}
    with _scratch("optistudio-coreml-") as folder:
        made = coreml.export_coreml(
            source.model_path,
            source.info,
            folder,
            name=name,
            input_profile=source.input_profile,
            precisions=source.coreml_precisions,
        )
        packages = []
        for package in made.packages:
            arcname = f"coreml/{package.path.name}"
            for path in package.files():
                writer.add_file(f"{arcname}/{path.relative_to(package.path).as_posix()}", path)
            packages.append(package.entry(arcname))
    if made.skipped:
        skipped["coreml"] = _skipped_line("Core ML", "package", made.skipped)
    if made.static_shapes and packages:
        writer.static_shapes["coreml"] = made.static_shapes
    return {
        "runs_on": coreml.RUNS_ON,
        "packages": packages,
        "versions": made.versions,
        "checked": made.route_check,
        "static_shapes": made.static_shapes,
    }


@contextmanager
def _scratch(prefix: str) -> Iterator[Path]:
    """A temporary folder for a converter's files, removed once they are in the bundle."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _skipped_line(runtime: str, noun: str, skipped: dict[str, str]) -> str:
    """One line for the precisions a part left out: the reason once when they share it."""
    reasons = set(skipped.values())
    if len(reasons) == 1:
        return f"No {runtime} {', '.join(p.upper() for p in skipped)} {noun}: {reasons.pop()}"
    return " ".join(f"No {runtime} {p.upper()} {noun}: {r}" for p, r in skipped.items())


def _litert(
    source: BundleSource, name: str, writer: _Writer, skipped: dict[str, str]
) -> dict[str, Any]:
    """`litert/<name>_<precision>.tflite` per precision made; pipeline.json's "litert"."""
    if not source.litert_precisions or openvino_ir.is_ir(source.model_path):  # not asked for
        # (a library call): nothing to explain; an IR: left_out says why
        return {"runs_on": litert_part.RUNS_ON, "files": {}}
    with _scratch("optistudio-litert-") as folder:
        made = litert_part.export_litert(
            source.model_path,
            source.info,
            folder,
            name=name,
            input_profile=source.input_profile,
            precisions=source.litert_precisions,
        )
        files = {}
        for precision, path in made.files.items():
            writer.add_file(f"litert/{path.name}", path)
            files[precision] = f"litert/{path.name}"
        tensors = tflite_tensors(made.files, source.info)  # the .tflite's own names and dims
    if made.skipped:
        skipped["litert"] = _skipped_line("LiteRT", "file", made.skipped)
    for precision, why in made.static_shapes.items():
        writer.static_shapes[f"litert {precision}"] = why
    return {
        "runs_on": litert_part.RUNS_ON,
        "files": files,
        "tensors": {p: t.model_dump(mode="json") for p, t in tensors.items()},
        "versions": made.versions,
    }


def _write_manifest(source: BundleSource, writer: _Writer, skipped: dict[str, str]) -> None:
    files = dict(sorted(writer.digests.items()))
    sums = "".join(f"{digest}  {member}\n" for member, digest in files.items())
    manifest = {
        "name": source.name,
        "sha256_of_model": source.info.sha256,
        "model_format": openvino_ir.FORMAT if openvino_ir.is_ir(source.model_path) else "onnx",
        "files": files,
        "skipped": skipped,
        "static_shapes": writer.static_shapes,
        "serving": serving_of(source)["note"],
        "runs_as": manifest_entry(runs_as(source)),
        "check": "unzip the bundle, then run `sha256sum -c SHA256SUMS`",
    }
    writer.add_text("SHA256SUMS", sums)
    writer.add_json("manifest.json", manifest)


def read_manifest(bundle: Path) -> dict[str, Any]:
    with zipfile.ZipFile(bundle) as z:
        return dict(json.loads(z.read("manifest.json")))


def verify_bundle(bundle: Path) -> list[str]:
    """Members whose SHA-256 does not match the manifest (streamed); empty when all match."""
    manifest = read_manifest(bundle)
    bad = []
    with zipfile.ZipFile(bundle) as z:
        for member, expected in manifest["files"].items():
            digest = hashlib.sha256()
            with z.open(member) as stream:
                while chunk := stream.read(CHUNK):
                    digest.update(chunk)
            if digest.hexdigest() != expected:
                bad.append(member)
    return bad
