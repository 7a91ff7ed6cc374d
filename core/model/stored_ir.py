"""An OpenVINO IR made by the studio's own passes, checked and stored as a model of the catalog.

NNCF's INT8 on the OpenVINO model (core/passes/nncf_openvino.py) writes an IR (.xml + .bin) that
only OpenVINO runs. It is stored the way intake stores an ONNX model (stored_folder): both files
are copied into a staging folder in the store while they are hashed (content_address.ir_address),
checked there, then renamed into place as model.xml and model.bin. The check is OpenVINO's own
reader (`Core.read_model`) on the staged copy, and the IR's inputs must be, by name, those of
the ONNX model it was made from (the pass keeps ONNX's names): it is fed as that model is.

Its card (ModelInfo) is the IR as OpenVINO reads it: input and output names, dtypes and shapes
(a dynamic dim takes the name the original gives the dim at that place), OpenVINO's op types
and its size. The ONNX IR version, opsets, parameter and FLOP counts are the original's, from
which the IR was converted; a warning on the card says so.

Only the studio's passes call this, on files they wrote: an uploaded .xml is still refused at
upload (docs/SECURITY.md).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from optistudio.core.errors import ModelRejected, first_line
from optistudio.core.model.content_address import IR_SUFFIX, ir_files
from optistudio.core.model.info import Dim, ModelInfo, TensorSpec
from optistudio.core.model.intake import StoredModel
from optistudio.core.model.stored_folder import IR_STORED_NAME, place_staged, staged_ir_copy

NOT_NODES = frozenset({"Parameter", "Result", "Constant"})
"""OpenVINO op types that are not computing nodes (inputs, outputs, weights)."""
IR_WARNING = (
    "an OpenVINO IR (.xml + .bin), run by OpenVINO only: its inputs, outputs and op types are "
    "the IR's; its ONNX IR version, opsets, parameter and FLOP counts are those of the ONNX "
    "model it was converted from"
)
_HINT = "Optimize the model again; the variant's IR was not written completely."


def store_ir(source: Path, *, artifact_dir: Path, like: ModelInfo) -> StoredModel:
    """Check the IR `source` (.xml, its .bin beside it) and store it as
    artifact_dir/models/<sha[:2]>/<sha>/model.xml + model.bin; `like` is the card of the ONNX
    model it was made from. Nothing is stored when a check refuses it (ModelRejected)."""
    source = Path(source)
    _check_pair(source)
    models = Path(artifact_dir) / "models"
    with staged_ir_copy(source, models) as (staged, sha256):
        info = describe_ir(staged, sha256, like)
        folder = models / sha256[:2] / sha256
        path, created = place_staged(staged.parent, folder, sha256, name=IR_STORED_NAME)
    return StoredModel(path=path, info=info, created=created)


def _check_pair(source: Path) -> None:
    missing = [path.name for path in ir_files(source) if not path.is_file()]
    if source.suffix != IR_SUFFIX or missing:
        raise ModelRejected(
            f"{source.name!r} is not an OpenVINO IR with its weights beside it"
            + (f" ({', '.join(missing)} missing)." if missing else "."),
            hint=_HINT,
        )


def describe_ir(path: Path, sha256: str, like: ModelInfo) -> ModelInfo:
    """The card of the IR at `path` (read by OpenVINO), addressed `sha256`: its interface and
    op types, the rest from `like` (the ONNX model it was made from); ModelRejected when
    OpenVINO cannot read it or its inputs are not `like`'s."""
    graph = read_ir(path)
    inputs = [_tensor(port, like.inputs) for port in graph.inputs]
    outputs = [_tensor(port, like.outputs) for port in graph.outputs]
    _check_inputs(inputs, like.inputs)
    ops = Counter(op.get_type_name() for op in graph.get_ops())
    histogram = {op: n for op, n in ops.most_common() if op not in NOT_NODES}
    return like.model_copy(
        update={
            "sha256": sha256,
            "size_bytes": sum(file.stat().st_size for file in ir_files(path)),
            "producer": f"OpenVINO {_version()}",
            "graph_name": graph.get_friendly_name(),
            "inputs": inputs,
            "outputs": outputs,
            "op_histogram": histogram,
            "node_count": sum(histogram.values()),
            "external_data": False,
            "metadata_keys": [],
            "warnings": [IR_WARNING],
        }
    )


def read_ir(path: Path) -> Any:
    """OpenVINO's model of the IR (Core.read_model); ModelRejected in one sentence otherwise."""
    try:
        import openvino as ov
    except ImportError:
        raise ModelRejected(
            "OpenVINO is not installed here, so the OpenVINO IR cannot be checked.",
            hint="pip install openvino on this worker.",
        ) from None
    try:
        return ov.Core().read_model(str(path))
    except Exception as exc:  # OpenVINO raises its own untyped errors for a bad IR
        said = first_line(exc).replace(str(Path(path).parent), ".")  # no server path
        raise ModelRejected(f"OpenVINO could not read the IR: {said}", hint=_HINT) from None


def _version() -> str:
    import openvino as ov

    return str(ov.__version__).split("-", 1)[0]


def _tensor(port: Any, originals: list[TensorSpec]) -> TensorSpec:
    """A port as a TensorSpec: the original's name among the port's names where there is one,
    its dims from the IR (a dynamic dim named as the original names it at that place)."""
    names = port.get_names()
    original = next((spec for spec in originals if spec.name in names), None)
    name = original.name if original else port.get_any_name()
    dtype = port.get_element_type().to_dtype().name
    return TensorSpec(name=name, dtype=dtype, shape=_shape(port.get_partial_shape(), original))


def _shape(shape: Any, original: TensorSpec | None) -> list[Dim]:
    if shape.rank.is_dynamic:
        return list(original.shape) if original else []
    same_rank = original is not None and len(original.shape) == len(shape)
    dims: list[Dim] = []
    for index, dim in enumerate(shape):
        if dim.is_static:
            dims.append(dim.get_length())
        elif same_rank and original is not None and not isinstance(original.shape[index], int):
            dims.append(original.shape[index])
        else:
            dims.append(None)
    return dims


def _check_inputs(inputs: list[TensorSpec], originals: list[TensorSpec]) -> None:
    """The IR is fed as its original is: the same input names."""
    have, want = sorted(t.name for t in inputs), sorted(t.name for t in originals)
    if have != want:
        raise ModelRejected(
            f"The OpenVINO IR's inputs ({', '.join(have) or 'none'}) are not those of the model "
            f"it was made from ({', '.join(want) or 'none'}), so it cannot be fed as that model.",
            hint="Optimize the model again; a pass that renames inputs cannot store its IR.",
        )
