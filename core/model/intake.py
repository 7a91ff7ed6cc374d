"""Model intake: reject what we cannot handle with a reason, describe and store the rest.

Checks run cheapest and safest first: the file's size before reading it; the protobuf parsed
without external data; declared sizes (every stored tensor, fixed-shape inputs, outputs and value
infos, constant-shaped ConstantOfShape) against a memory budget, from the protobuf's dims alone,
without materialising a tensor; external-data locations validated (relative, inside the model's
folder, no part starting with ".", not the stored graph's own name model.onnx, long enough for
what each tensor declares) before any of that data is opened; then
onnx.checker on the file path, which handles models over protobuf's 2 GB limit; last, when the
caller hands one in, the load check (whether a runtime loads the file: ONNX Runtime's, from
core/backends/loadable.py, a floor this package may not import). Everything after that only
describes the model. Its address (ModelInfo.sha256) is the hash of the graph together with every
external data file's name and bytes (content_address).

Accepted is what ONNX Runtime runs: a negative dim (Paddle2ONNX's -1) is a dynamic dim, and an
IR 3 model whose initializers are not all listed as graph inputs is checked as if they were; a
model calling operators ONNX does not define in its own domains (ONNX Runtime's, written by its
graph optimizer: see undefined_ops) is not the checker's to refuse, its load decides.
No message names a server path: the file's folder is cut out of what the checker or the load
check says.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import onnx
from google.protobuf.message import DecodeError
from onnx.external_data_helper import ExternalDataInfo, uses_external_data

from optistudio.core.errors import ModelRejected
from optistudio.core.model.content_address import address_of
from optistudio.core.model.declared_sizes import (
    check_declared_sizes,
    declared_bytes,
    default_tensor_budget,
    model_tensors,
)
from optistudio.core.model.flops import estimate_flops
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.core.model.parameters import parameter_count
from optistudio.core.model.stored_folder import STORED_NAME, place_staged, staged_copy
from optistudio.core.model.undefined_ops import undefined_ops

logger = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 512 * 1024**2
"""The browser upload limit's default (services.settings.max_upload_mb). Intake applies a
limit only where its caller passes one: an upload's; a local file or a folder on the workers'
shared storage has none but the machine's (declared sizes, node count, the load check)."""
MAX_UPLOAD_ENV = "OPTISTUDIO_MAX_UPLOAD_MB"
OLDEST_RUN_OPSET = 7
"""ONNX Runtime runs default-domain opsets from 7 up; only an older model gets a warning (the
passes that need a newer one, NNCF's INT8 at 10 and up, convert it themselves and say so)."""

_SNIFF_BYTES = 512
_SIGNATURES = (
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"PK\x03\x04", "a ZIP archive (PyTorch .pt/.pth checkpoints are ZIP archives)"),
    (b"\x89HDF", "an HDF5 file (a Keras .h5 model?)"),
    (b"GGUF", "a GGUF file (llama.cpp format)"),
)
_EXPORT_HINT = (
    "Export the model to ONNX first (torch.onnx.export, tf2onnx) and upload the .onnx file."
)
_DEFAULT_DOMAINS = ("", "ai.onnx")
_NON_TENSOR_DTYPES = ("sequence", "map", "optional", "opaque", "undefined")
IR_WEIGHTS_NEED_NOT_BE_INPUTS = 4
"""From this IR version on an initializer need not be a graph input; before, each had to be."""

LoadCheck = Callable[[Path], None]
"""Raises ModelRejected when no runtime here loads the file (e.g. check_loads in
optistudio.core.backends.loadable). Intake runs it last, so it never opens an unsafe file."""


@dataclass(frozen=True)
class StoredModel:
    """A model accepted by intake and kept in the artifact store."""

    path: Path
    info: ModelInfo
    created: bool = False
    """Whether this store wrote the model's folder (False: a copy that verified was there)."""


def inspect_model(
    path: Path,
    *,
    max_bytes: int | None = None,
    max_tensor_bytes: int | None = None,
    load_check: LoadCheck | None = None,
) -> ModelInfo:
    """Validate an .onnx file (and its external data) and return its model card.

    Raises ModelRejected, with a message naming the problem, for a missing, empty, oversized,
    non-ONNX, truncated or invalid file, and for external data that is missing or would be read
    from outside the model's folder. `max_bytes` (None: no limit) applies to the file plus its
    external data;
    `max_tensor_bytes` (default: half of this machine's memory) to any one declared tensor.
    `load_check` runs after every structural check: what takes models in passes ONNX Runtime's
    (check_loads), so a stored model is one ONNX Runtime loaded.
    """
    return _inspect(Path(path), max_bytes, max_tensor_bytes, load_check)[0]


def store_model(
    source: Path,
    *,
    artifact_dir: Path,
    max_bytes: int | None = None,
    max_tensor_bytes: int | None = None,
    load_check: LoadCheck | None = None,
) -> StoredModel:
    """Inspect `source`, then store it as artifact_dir/models/<sha[:2]>/<sha>/model.onnx.

    Nothing is stored when inspection (or `load_check`) rejects the file. The address covers
    the graph and every external data file, by name and bytes (content_address). What is
    stored is exactly what was checked: once the cheap checks pass on `source`, the graph (as
    model.onnx) and its external data are copied into a staging folder in the store and hashed
    as they are copied; every check then runs on that copy, which is renamed into place in one
    step; an existing folder is kept only when it verifies (stored_folder).
    """
    source = Path(source)
    models = Path(artifact_dir) / "models"
    _, locations, _ = _read_checked(source, max_bytes, max_tensor_bytes)
    with staged_copy(source, locations, models) as (staged, sha256):
        info, named = _inspect(staged, max_bytes, max_tensor_bytes, load_check, sha256=sha256)
        if named != locations:
            raise ModelRejected(
                "The model's files changed while they were being stored.",
                hint="Upload the model again, and leave its files unchanged until it is stored.",
            )
        path, created = place_staged(staged.parent, models / sha256[:2] / sha256, sha256)
    return StoredModel(path=path, info=info, created=created)


def _inspect(
    path: Path,
    max_bytes: int | None,
    max_tensor_bytes: int | None,
    load_check: LoadCheck | None,
    *,
    sha256: str | None = None,
) -> tuple[ModelInfo, list[str]]:
    """The model card and the external data locations (relative to the model's folder);
    `sha256`: the address when the caller hashed the files already."""
    model, locations, total_size = _read_checked(path, max_bytes, max_tensor_bytes)
    _run_checker(path, model)
    if load_check is not None:
        _run_load_check(load_check, path)
    sha256 = sha256 or address_of(path, locations)
    return _describe(model, sha256, total_size, bool(locations)), locations


def _read_checked(
    path: Path, max_bytes: int | None, max_tensor_bytes: int | None
) -> tuple[onnx.ModelProto, list[str], int]:
    """The cheap checks: the graph (parsed without its data), its external data locations and
    the size of everything, each against its limit."""
    file_size = _file_size(path)
    _check_size(file_size, max_bytes)
    model = _parse(path)
    check_declared_sizes(model, max_tensor_bytes or default_tensor_budget())
    locations = _external_locations(model, path.parent)
    total_size = file_size + sum((path.parent / loc).stat().st_size for loc in locations)
    _check_size(total_size, max_bytes)
    return model, locations, total_size


def _file_size(path: Path) -> int:
    if not path.is_file():
        raise ModelRejected(f"No model file at {path.name!r}.", hint="Upload the .onnx file again.")
    size = path.stat().st_size
    if size == 0:
        raise ModelRejected(
            "The file is empty (0 bytes).", hint="The upload may have failed; upload it again."
        )
    return size


def _check_size(size: int, max_bytes: int | None) -> None:
    if max_bytes is not None and size > max_bytes:
        raise ModelRejected(
            f"The model is {_human_size(size)}, over the {_human_size(max_bytes)} limit.",
            hint=f"Set {MAX_UPLOAD_ENV} (in MB) to raise the upload limit, or add the model "
            "from a local file (the CLI) or the workers' shared storage, where it does not apply.",
        )


def _human_size(size: int) -> str:
    return f"{size / 1024**2:.1f} MB" if size >= 1024**2 else f"{size:,} bytes"


def _parse(path: Path) -> onnx.ModelProto:
    """The ModelProto without external data; ModelRejected when the bytes are not ONNX."""
    try:
        model = onnx.load(str(path), format="protobuf", load_external_data=False)
    except DecodeError:
        raise _unparsable(path) from None
    if model.ir_version <= 0 or not model.HasField("graph"):
        raise _not_onnx(_sniff(path))
    return model


def _unparsable(path: Path) -> ModelRejected:
    """Truncated ONNX when the bytes start like a ModelProto (ir_version first), else not ONNX."""
    head = _head(path)
    if len(head) >= 2 and head[0] == 0x08 and 1 <= head[1] <= 20:
        return ModelRejected(
            "The ONNX file is truncated or corrupted: its protobuf could not be parsed.",
            hint="The upload or download was probably cut short; upload the complete file again.",
        )
    return _not_onnx(_sniff(path))


def _not_onnx(looks_like: str | None) -> ModelRejected:
    what = f"it looks like {looks_like}" if looks_like else "it is not an ONNX protobuf"
    return ModelRejected(f"This is not an ONNX model: {what}.", hint=_EXPORT_HINT)


def _head(path: Path) -> bytes:
    with path.open("rb") as file:
        return file.read(_SNIFF_BYTES)


def _sniff(path: Path) -> str | None:
    """A short description of well-known non-ONNX formats, from the first bytes."""
    head = _head(path)
    for signature, description in _SIGNATURES:
        if head.startswith(signature):
            return description
    if all(32 <= byte < 127 or byte in b"\t\n\r" for byte in head):
        return "a text file"
    return None


def _external_locations(model: onnx.ModelProto, folder: Path) -> list[str]:
    """Validated external data locations: relative, inside `folder`, present and long enough."""
    tensors = [t for t in model_tensors(model) if uses_external_data(t)]
    infos = [_external_info(t) for t in tensors]
    locations = sorted({info.location for info in infos})
    for location in locations:
        _check_location(location, folder)
    missing = [loc for loc in locations if not (folder / loc).is_file()]
    if missing:
        raise ModelRejected(
            f"External data file(s) missing next to the model: {', '.join(missing)}.",
            hint="Upload the data files with the model, or save it as one file if under 2 GB.",
        )
    for tensor, info in zip(tensors, infos, strict=True):
        _check_extent(tensor, info, folder)
    return locations


def _external_info(tensor: onnx.TensorProto) -> ExternalDataInfo:
    try:
        return ExternalDataInfo(tensor)
    except ValueError:
        raise ModelRejected(
            f"Tensor {tensor.name!r} has a malformed external data entry (offset or length).",
            hint="Re-save the model with onnx.save(..., save_as_external_data=True).",
        ) from None


def _check_location(location: str, folder: Path) -> None:
    """Reject absolute locations, any that resolve outside the model's folder (traversal), any
    part starting with "." and the name the graph is stored under (stored_folder)."""
    hint = "External data must sit in the model's folder and be named by relative paths."
    if not location or "\x00" in location:
        raise ModelRejected(f"External data location {location!r} is not a file name.", hint=hint)
    windows = PureWindowsPath(location)
    if PurePosixPath(location).is_absolute() or windows.is_absolute() or windows.drive:
        raise ModelRejected(
            f"External data location {location!r} is an absolute path; refusing to read it.",
            hint=hint,
        )
    root = folder.resolve()
    if not (root / location).resolve().is_relative_to(root):
        raise ModelRejected(
            f"External data location {location!r} points outside the model's folder; "
            "refusing to read it.",
            hint=hint,
        )
    _check_stored_name(location, hint)


def _check_stored_name(location: str, hint: str) -> None:
    """Refuse hidden names (where the store's temp files go) and the stored graph's own name."""
    parts = location.replace("\\", "/").split("/")
    if any(part.startswith(".") for part in parts):
        raise ModelRejected(
            f"External data location {location!r} has a part starting with '.'.",
            hint=hint + " Rename the data file so no part of its path starts with '.'.",
        )
    if "/".join(part for part in parts if part).casefold() == STORED_NAME:
        raise ModelRejected(
            f"External data location {location!r} is the name the graph itself is stored under "
            f"({STORED_NAME}).",
            hint="Re-save the model with its weights in a file of another name, e.g. "
            "onnx.save(..., save_as_external_data=True, location='model.onnx.data').",
        )


def _check_extent(tensor: onnx.TensorProto, info: ExternalDataInfo, folder: Path) -> None:
    """The data file holds what the entry says (its length, else what the dims call for)."""
    size = (folder / info.location).stat().st_size
    wanted = info.length if info.length is not None else declared_bytes(tensor)
    if (info.offset or 0) + wanted > size:
        raise ModelRejected(
            f"External data file {info.location!r} is too short for tensor {tensor.name!r} "
            f"({size:,} bytes, needs {(info.offset or 0) + wanted:,}).",
            hint="The data file looks truncated, or the tensor declares more than it stores; "
            "upload the complete files again.",
        )


def _run_checker(path: Path, model: onnx.ModelProto) -> None:
    try:
        onnx.checker.check_model(_checkable(path, model))
    except UnicodeDecodeError:  # the checker's message quotes a name that is not UTF-8
        raise ModelRejected(
            "The ONNX checker rejected the model, and a name or string in it is not valid UTF-8.",
            hint="The file is probably corrupted; export or upload it again.",
        ) from None
    except onnx.checker.ValidationError as exc:
        if undefined_ops(model):  # ONNX Runtime's own operators: its load judges the model
            return
        lines = str(exc).strip().splitlines()
        first = _without_folder(lines[0], path) if lines else type(exc).__name__
        raise ModelRejected(
            f"The ONNX checker rejected the model: {first}",
            hint="Re-export the model with a current exporter, or fix it with onnx.checker.",
        ) from None


def _checkable(path: Path, model: onnx.ModelProto) -> str | onnx.ModelProto:
    """What the checker reads: the file, or, for an IR<4 model with initializers that are not
    graph inputs (its IR's rule, which ONNX Runtime does not hold it to), a copy listing them."""
    listed = {value.name for value in model.graph.input}
    unlisted = [t for t in model.graph.initializer if t.name not in listed]
    if model.ir_version >= IR_WEIGHTS_NEED_NOT_BE_INPUTS or not unlisted:
        return str(path)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.input.extend(
        onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in unlisted
    )
    return copy


def _run_load_check(load_check: LoadCheck, path: Path) -> None:
    """The caller's load check; its refusal keeps its words, less any server path."""
    try:
        load_check(path)
    except ModelRejected as exc:
        hint = _without_folder(exc.hint, path) if exc.hint else None
        raise ModelRejected(_without_folder(exc.message, path), hint=hint) from exc


def _without_folder(text: str, path: Path) -> str:
    """`text` with the model's folder cut out, so paths in it read as bare file names."""
    candidates = (path.parent, path.parent.absolute(), path.parent.resolve())
    folders = {str(folder) for folder in candidates if folder.is_absolute() and folder.name}
    for folder in sorted(folders, key=len, reverse=True):
        text = text.replace(folder + os.sep, "").replace(folder, ".")
    return text


def _describe(
    model: onnx.ModelProto, sha256: str, size_bytes: int, external_data: bool
) -> ModelInfo:
    graph = model.graph
    inputs = _graph_inputs(graph)
    flops = _flops(model)
    opsets = _opsets(model)
    return ModelInfo(
        sha256=sha256,
        size_bytes=size_bytes,
        ir_version=model.ir_version,
        opsets=opsets,
        producer=f"{model.producer_name} {model.producer_version}".strip(),
        graph_name=graph.name,
        inputs=inputs,
        outputs=[_tensor_spec(value) for value in graph.output],
        op_histogram=_op_histogram(graph),
        node_count=len(graph.node),
        parameter_count=parameter_count(model),
        flops_estimate=flops,
        external_data=external_data,
        metadata_keys=sorted({prop.key for prop in model.metadata_props}),
        warnings=_warnings(opsets, inputs, flops),
    )


def _opsets(model: onnx.ModelProto) -> dict[str, int]:
    return {
        "" if entry.domain in _DEFAULT_DOMAINS else entry.domain: entry.version
        for entry in model.opset_import
    }


def _graph_inputs(graph: onnx.GraphProto) -> list[TensorSpec]:
    """Graph inputs that are real inputs: old exporters also list initializers as inputs."""
    weights = {init.name for init in graph.initializer}
    return [_tensor_spec(value) for value in graph.input if value.name not in weights]


def _tensor_spec(value: onnx.ValueInfoProto) -> TensorSpec:
    """dtype as a numpy name ('sequence', 'map'... for non-tensors); shape [] if rank unknown.

    A dim without a positive size is dynamic: its name, or None when it has none (a negative
    size, an empty name or '?'; TensorSpec makes the last None)."""
    kind = value.type.WhichOneof("value")
    if kind not in ("tensor_type", "sparse_tensor_type"):
        return TensorSpec(
            name=value.name, dtype=(kind or "undefined").removesuffix("_type"), shape=[]
        )
    tensor = getattr(value.type, kind)
    dims = [
        dim.dim_value if dim.dim_value > 0 else (dim.dim_param or None) for dim in tensor.shape.dim
    ]
    return TensorSpec(name=value.name, dtype=_dtype_name(tensor.elem_type), shape=dims)


def _dtype_name(elem_type: int) -> str:
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(elem_type).name
    except KeyError:
        return "undefined"


def _op_histogram(graph: onnx.GraphProto) -> dict[str, int]:
    """Top-level op counts, most common first; non-default domains prefix the op type."""
    counts = Counter(
        node.op_type if node.domain in _DEFAULT_DOMAINS else f"{node.domain}.{node.op_type}"
        for node in graph.node
    )
    return dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _flops(model: onnx.ModelProto) -> int | None:
    try:
        return estimate_flops(model)
    except Exception:  # an estimate must never reject a model; keep the traceback in the log
        logger.exception("FLOPs estimate failed for graph %r", model.graph.name)
        return None


def _warnings(opsets: dict[str, int], inputs: list[TensorSpec], flops: int | None) -> list[str]:
    warnings = []
    opset = opsets.get("", 0)
    if 0 < opset < OLDEST_RUN_OPSET:
        warnings.append(
            f"opset {opset} is older than ONNX Runtime runs ({OLDEST_RUN_OPSET} and newer): "
            "convert it (onnx.version_converter) and upload it again"
        )
    if opset > onnx.defs.onnx_opset_version():
        warnings.append(f"opset {opset} is newer than this onnx package knows")
    if not inputs:
        warnings.append("the model has no inputs; it only computes constants")
    warnings.extend(filter(None, map(_input_warning, inputs)))
    if flops is None:
        warnings.append("FLOPs could not be estimated: some Conv/MatMul/Gemm shapes are unknown")
    elif any(index > 0 for spec in inputs for index in spec.dynamic_dims):
        warnings.append("the FLOPs estimate sets every dynamic dim to 1 (e.g. 1x1 images)")
    return warnings


def _input_warning(spec: TensorSpec) -> str | None:
    if spec.dtype in _NON_TENSOR_DTYPES:
        return f"input {spec.name} is a {spec.dtype}, not a tensor; inputs cannot be synthesized"
    if not spec.dynamic_dims:
        return None
    names = [
        spec.shape[i] if isinstance(spec.shape[i], str) else f"#{i}" for i in spec.dynamic_dims
    ]
    return f"dynamic dims {names} on input {spec.name}"
