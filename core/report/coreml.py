"""Core ML packages (.mlpackage) of an ONNX model, for the export bundle; they are not run here.

The route is the one coremltools documents, since coremltools 6+ has no ONNX frontend: the ONNX
graph becomes a `torch.nn.Module` (`optistudio.core.torch_bridge`), is traced with
`torch.jit.trace` at the model's input profile, and `coremltools.convert(...,
convert_to="mlprogram")` writes an ML program. Tracing, not `torch.export`: on exported CNNs
(PP-OCR's classifier and recognizer) torch.export stops at the Reshape sizes the graph computes
from Shape ops (data-dependent guards), while a trace records them at the profile's shapes,
which Core ML packages fix anyway. With torch 2.13, `torch.jit.trace` warns that it is
deprecated and coremltools 9.0 that it was tested up to torch 2.7; both work. The traced
module's outputs are checked against ONNX Runtime's before converting. One package per precision:

- fp32: `compute_precision=FLOAT32`;
- fp16: `compute_precision=FLOAT16` (weights and compute in FP16; inputs and outputs keep their types);
- int8: the FP32 program's weights quantized to INT8 (per-channel, symmetric) by
  `coremltools.optimize.coreml.linear_quantize_weights`, dequantized when the model loads;
  weights under 2048 elements (coremltools' default threshold) stay FP32.

A package is checked as far as Linux allows: its spec loads (`skip_model_load=True`: Core ML
itself exists only on macOS / iOS) and its inputs and outputs have the ONNX model's names (as
coremltools writes them: identifiers, 'emb/out' -> 'emb_out', listed with the ONNX name), element
types and shapes. Shapes are fixed at the input profile (a dynamic ONNX dim takes the profile's
size); int64 tensors are int32 in Core ML, which has no int64. Nothing here runs a package.
torch and coremltools are imported only when a package is made (`pip install 'optistudio[coreml]'`).
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from optistudio.core.backends.coreml_backend import RUNS_ON
from optistudio.core.data.input_profile import InputProfile, propose_input_profile
from optistudio.core.data.inputs import synthesize_inputs
from optistudio.core.errors import OptistudioError, PassFailed, first_line
from optistudio.core.model.info import Dim, ModelInfo, TensorSpec
from optistudio.core.numerics.crosscheck import check_outputs, reference_outputs
from optistudio.core.report.coreml_fold import folded_constant_shapes
from optistudio.core.report.skip_reasons import sentence
from optistudio.core.report.static_shapes import profile_shapes, shown, static_copy
from optistudio.core.torch_bridge import UnsupportedOps, to_torch

__all__ = ["RUNS_ON", "CoreMLExport", "CoreMLPackage", "export_coreml", "missing"]

PRECISIONS = ("fp32", "fp16", "int8")
DEPLOYMENT_TARGET = "iOS16"
"""The oldest OS the packages load on (iOS 16 / macOS 13): FP16 inputs and INT8 weights need it."""
EXTRA_HINT = "pip install 'optistudio[coreml]'"
COREML_TYPES = {"float32": "FLOAT32", "float16": "FLOAT16", "int32": "INT32", "int64": "INT32"}
"""ONNX element type -> Core ML multi-array type; int64 becomes int32 (Core ML has no int64)."""
QUANTIZED_WEIGHT_OPS = frozenset({"constexpr_affine_dequantize", "constexpr_blockwise_shift_scale"})
"""ML program ops that hold INT8 weights and dequantize them when the model loads."""


@dataclass
class CoreMLPackage:
    """One .mlpackage folder made and checked, with what an app needs to call it."""

    precision: str
    path: Path
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    quantized_weights: int = 0
    """Weight tensors stored as INT8 (0 unless precision is 'int8')."""
    notes: list[str] = field(default_factory=list)

    def files(self) -> list[Path]:
        return sorted(p for p in self.path.rglob("*") if p.is_file())

    def entry(self, folder: str) -> dict[str, Any]:
        """This package as pipeline.json lists it (`folder`: its path inside the bundle)."""
        return {
            "precision": self.precision,
            "package": folder,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "quantized_weights": self.quantized_weights,
            "notes": self.notes,
        }


@dataclass
class CoreMLExport:
    packages: list[CoreMLPackage]
    skipped: dict[str, str]
    """Precision -> why no package was made for it."""
    versions: dict[str, str] = field(default_factory=dict)
    route_check: str = ""
    """The traced PyTorch module's outputs against ONNX Runtime's (the part of the route that
    runs here); the Core ML packages themselves are not run."""
    static_shapes: str = ""
    """'' or why the packages were made from the model at the job's static shapes."""


def missing() -> str | None:
    """One sentence saying what is missing for Core ML export here, or None when nothing is."""
    absent = [name for name in ("coremltools", "torch") if not _importable(name)]
    if not absent:
        return None
    return (
        f"Core ML export needs {' and '.join(absent)}, which "
        f"{'is' if len(absent) == 1 else 'are'} not installed here: {EXTRA_HINT}."
    )


def _importable(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def export_coreml(
    model_path: Path,
    info: ModelInfo,
    out_dir: Path,
    *,
    name: str,
    input_profile: dict[str, Any] | None = None,
    precisions: Sequence[str] = PRECISIONS,
) -> CoreMLExport:
    """Write `out_dir/<name>_<precision>.mlpackage` for each precision it can make.

    A model the route cannot take (an op the torch bridge lacks, a trace or conversion error)
    is a skipped precision with the reason; so is a package whose interface differs from the
    ONNX model's. Missing coremltools or torch skips every precision with the install hint.
    """
    absent = missing()
    if absent:
        return CoreMLExport([], dict.fromkeys(precisions, absent))
    import coremltools as ct
    import torch

    versions = {"coremltools": ct.__version__, "torch": torch.__version__}
    try:
        _check_types(info)
        traced, examples, route, static = _routed(model_path, info, input_profile)
    except OptistudioError as exc:
        return CoreMLExport([], dict.fromkeys(precisions, exc.message), versions)
    converter = Converter(traced, examples, info)
    packages, skipped = [], {}
    for precision in precisions:
        try:
            path = out_dir / f"{name}_{precision}.mlpackage"
            packages.append(converter.package(precision, path))
        except OptistudioError as exc:
            skipped[precision] = exc.message
    return CoreMLExport(packages, skipped, versions, route, static)


def _routed(
    model_path: Path, info: ModelInfo, input_profile: dict[str, Any] | None
) -> tuple[Any, dict[str, np.ndarray], str, str]:
    """The traced module, its examples, the route's check, and '' or the sentence saying it
    was traced from the static copy (`static_shapes`) because the dynamic graph was not."""
    try:
        traced, examples = trace(model_path, info, input_profile)
        return traced, examples, check_route(model_path, info, traced, examples), ""
    except OptistudioError as exc:
        dynamic = exc.message
    shapes = profile_shapes(info, input_profile)
    with tempfile.TemporaryDirectory(prefix="optistudio-coreml-static-") as work:
        try:
            static = static_copy(model_path, info, shapes, Path(work) / "static.onnx")
            traced, examples = trace(static, info, input_profile)
            route = check_route(model_path, info, traced, examples)
        except OptistudioError as exc:
            raise PassFailed(
                f"{dynamic} At the static shapes {shown(shapes)}: {exc.message}"
            ) from exc
    said = (
        f"traced from the model at the static shapes {shown(shapes)}, checked against it "
        f"first: the dynamic graph did not convert ({dynamic})"
    )
    return traced, examples, route, said


def trace(
    model_path: Path, info: ModelInfo, input_profile: dict[str, Any] | None = None
) -> tuple[Any, dict[str, np.ndarray]]:
    """The model as a traced TorchScript module, and the example inputs it was traced at."""
    import torch

    examples = example_inputs(info, input_profile)
    try:
        graph, _ = folded_constant_shapes(onnx.load(str(model_path)))
        module = to_torch(graph).eval()
    except UnsupportedOps as exc:
        raise PassFailed(
            f"The ONNX -> PyTorch route to Core ML does not support the ops {', '.join(exc.ops)}."
        ) from exc
    arguments = tuple(torch.from_numpy(np.ascontiguousarray(a)) for a in examples.values())
    try:
        with torch.no_grad():
            traced = torch.jit.trace(module, arguments, check_trace=False, strict=False)
    except Exception as exc:  # torch raises RuntimeError / TypeError for graphs it cannot trace
        why = sentence(
            "Tracing the model with torch.jit.trace failed", first_line(exc), kind=_kind(exc)
        )
        raise PassFailed(why) from exc
    return traced, examples


def check_route(
    model_path: Path, info: ModelInfo, traced: Any, examples: dict[str, np.ndarray]
) -> str:
    """Run the traced module and ONNX Runtime on the example inputs; the summary when they agree
    within the FP32 tolerance, else PassFailed naming the outputs that differ."""
    import torch

    with torch.no_grad():
        produced = traced(*(torch.from_numpy(np.ascontiguousarray(a)) for a in examples.values()))
    produced = produced if isinstance(produced, tuple | list) else (produced,)
    names = [tensor.name for tensor in info.outputs]
    check = check_outputs(
        names,
        reference_outputs(model_path, examples),
        [t.numpy() for t in produced],
        precision="fp32",
    )
    if not check.passed:
        raise PassFailed(f"The traced PyTorch module's {check.summary}.")
    return f"traced PyTorch module: {check.summary}"


def example_inputs(info: ModelInfo, input_profile: dict[str, Any] | None) -> dict[str, np.ndarray]:
    """Inputs at the model's profile (a full shape per input, batch 1 unless fixed); without
    one, at the profile Optistudio would propose for the model."""
    profile = (
        InputProfile.model_validate(input_profile)
        if input_profile
        else propose_input_profile(info.inputs, metadata_keys=info.metadata_keys)
    )
    shapes = {name: shape for name, shape in profile.shapes.items() if shape}
    examples, _ = synthesize_inputs(
        info.inputs, batch_size=1, overrides=shapes, values=profile.values or None
    )
    return examples


class Converter:
    """Core ML programs of one traced model; the FP32 program is converted once and reused for
    INT8 (its weights quantized), since each `coremltools.convert` takes most of the time."""

    def __init__(self, traced: Any, examples: dict[str, np.ndarray], info: ModelInfo) -> None:
        self.traced, self.examples, self.info = traced, examples, info
        self._programs: dict[str, Any] = {}

    def package(self, precision: str, path: Path) -> CoreMLPackage:
        """One .mlpackage at `path` (replaced if there), checked against the ONNX model."""
        mlmodel = self.program(precision)
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        mlmodel.save(str(path))
        return check_package(path, self.info, self.examples, precision)

    def program(self, precision: str) -> Any:
        if precision not in PRECISIONS:
            raise PassFailed(
                f"No Core ML precision {precision!r}; choose from {', '.join(PRECISIONS)}."
            )
        if precision not in self._programs:
            try:
                self._programs[precision] = self._make(precision)
            except Exception as exc:  # coremltools raises ValueError, RuntimeError, ...
                why = sentence(
                    "coremltools could not convert the model", first_line(exc), kind=_kind(exc)
                )
                raise PassFailed(why) from exc
        return self._programs[precision]

    def _make(self, precision: str) -> Any:
        if precision == "int8":
            return _int8_weights(self.program("fp32"))
        return _convert(self.traced, self.examples, self.info, precision)


def _check_types(info: ModelInfo) -> None:
    odd = [t for t in [*info.inputs, *info.outputs] if t.dtype not in COREML_TYPES]
    if odd:
        listed = ", ".join(f"{t.name} ({t.dtype})" for t in odd)
        raise PassFailed(f"Core ML tensors are float32, float16 or int32, not {listed}.")


def _convert(traced: Any, examples: dict[str, np.ndarray], info: ModelInfo, precision: str) -> Any:
    """A Core ML ML program computing in `precision` ('fp32' or 'fp16')."""
    import coremltools as ct

    inputs = [
        ct.TensorType(name=name, shape=array.shape, dtype=_numpy_type(array.dtype))
        for name, array in examples.items()
    ]
    outputs = [
        ct.TensorType(name=tensor.name, dtype=_numpy_type(np.dtype(tensor.dtype)))
        for tensor in info.outputs
    ]
    compute = ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32
    return ct.convert(
        traced,
        source="pytorch",
        inputs=inputs,
        outputs=outputs,
        convert_to="mlprogram",
        compute_precision=compute,
        minimum_deployment_target=getattr(ct.target, DEPLOYMENT_TARGET),
    )


def _numpy_type(dtype: np.dtype) -> type:
    """Core ML input types: int64 arrays go in as int32."""
    return {"float16": np.float16, "float32": np.float32}.get(dtype.name, np.int32)


def _int8_weights(mlmodel: Any) -> Any:
    from coremltools.optimize.coreml import (
        OpLinearQuantizerConfig,
        OptimizationConfig,
        linear_quantize_weights,
    )

    config = OptimizationConfig(
        global_config=OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8")
    )
    with np.errstate(divide="ignore", invalid="ignore"):  # an all-zero weight has scale 0
        return linear_quantize_weights(mlmodel, config=config)


def check_package(
    path: Path, info: ModelInfo, examples: dict[str, np.ndarray], precision: str
) -> CoreMLPackage:
    """Read the package's spec back (without Core ML) and compare it with the ONNX model.

    Raises PassFailed naming every difference in names, element types or shapes.
    """
    spec = read_spec(path)
    inputs = [_feature(f) for f in spec.description.input]
    outputs = [_feature(f) for f in spec.description.output]
    wanted_in = [_expected(t, list(examples[t.name].shape)) for t in info.inputs]
    wanted_out = [_expected(t, t.shape) for t in info.outputs]
    problems = _differences("input", inputs, wanted_in) + _differences(
        "output", outputs, wanted_out
    )
    if problems:
        raise PassFailed(
            f"The Core ML package's interface differs from the ONNX model: {'; '.join(problems)}."
        )
    return CoreMLPackage(
        precision=precision,
        path=path,
        inputs=_with_onnx_names(inputs, info.inputs),
        outputs=_with_onnx_names(outputs, info.outputs),
        quantized_weights=quantized_weights(spec),
        notes=_notes(info, examples),
    )


def read_spec(path: Path) -> Any:
    """The package's protobuf spec, read without loading the model (no Core ML on Linux)."""
    import coremltools as ct

    try:
        return ct.models.MLModel(str(path), skip_model_load=True).get_spec()
    except Exception as exc:  # a package that does not read back is our bug or a broken write
        why = sentence(
            f"The Core ML package at {path.name} does not load", first_line(exc), kind=_kind(exc)
        )
        raise PassFailed(why) from exc


def _kind(exc: BaseException) -> str:
    return type(exc).__name__


def _feature(feature: Any) -> dict[str, Any]:
    """A spec input/output as {name, type, shape}; shape is None when the spec leaves it open."""
    from coremltools.proto import FeatureTypes_pb2

    array = feature.type.multiArrayType
    kind = FeatureTypes_pb2.ArrayFeatureType.ArrayDataType.Name(array.dataType)
    return {"name": feature.name, "type": kind, "shape": list(array.shape) or None}


def _expected(tensor: TensorSpec, shape: Sequence[Dim]) -> dict[str, Any]:
    """What the package should declare; a dim that is not a fixed size matches any size."""
    return {"name": coreml_name(tensor.name), "type": COREML_TYPES[tensor.dtype], "shape": shape}


def coreml_name(name: str) -> str:
    """The name coremltools gives an ONNX tensor: an identifier ('softmax_11.tmp_0' ->
    'softmax_11_tmp_0'), by coremltools' own sanitizer."""
    from coremltools.converters.mil.mil.passes.defs.preprocess import NameSanitizer

    return str(NameSanitizer().sanitize_name(name))


def _with_onnx_names(
    features: list[dict[str, Any]], tensors: list[TensorSpec]
) -> list[dict[str, Any]]:
    """Features whose Core ML name differs from the ONNX one also carry `onnx_name`."""
    return [
        f if f["name"] == t.name else {**f, "onnx_name": t.name}
        for f, t in zip(features, tensors, strict=True)
    ]


def _differences(kind: str, found: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> list[str]:
    if [f["name"] for f in found] != [w["name"] for w in wanted]:
        return [
            f"{kind} names {[f['name'] for f in found]} instead of {[w['name'] for w in wanted]}"
        ]
    problems = []
    for got, want in zip(found, wanted, strict=True):
        if got["type"] != want["type"]:
            problems.append(f"{kind} {got['name']} is {got['type']}, not {want['type']}")
        if not _same_shape(got["shape"], want["shape"]):
            problems.append(f"{kind} {got['name']} has shape {got['shape']}, not {want['shape']}")
    return problems


def _same_shape(got: list[int] | None, want: Sequence[Dim]) -> bool:
    if got is None or len(got) != len(want):
        return False
    return all(not isinstance(w, int) or w <= 0 or g == w for g, w in zip(got, want, strict=True))


def quantized_weights(spec: Any) -> int:
    """How many weight tensors the ML program stores as INT8."""
    count = 0
    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            count += sum(op.type in QUANTIZED_WEIGHT_OPS for op in block.operations)
    return count


def _notes(info: ModelInfo, examples: dict[str, np.ndarray]) -> list[str]:
    notes = []
    for tensor in info.inputs:
        if tensor.dynamic_dims:
            notes.append(
                f"Input {tensor.name} is fixed at {list(examples[tensor.name].shape)} "
                f"(dynamic in ONNX: {[d if isinstance(d, int) else d or '?' for d in tensor.shape]})."
            )
    for tensor in [*info.inputs, *info.outputs]:
        if coreml_name(tensor.name) != tensor.name:
            notes.append(f"{tensor.name} is named {coreml_name(tensor.name)} in Core ML.")
        if tensor.dtype == "int64":
            notes.append(f"{tensor.name} is int32 in Core ML (int64 in ONNX).")
    return notes
