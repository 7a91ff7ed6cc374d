"""A pass's output file declares the outputs its input file declares.

Tools that rewrite a graph re-declare its outputs from their own shape inference: onnxslim and
ONNX Runtime's symbolic inference take a symbolic dim never to be 1, so a Squeeze without axes
of [batch_size, 2], which a torch export traced at batch 1 declares [batch_size] (AECMOS: at
batch 1 it returns [2]), comes back declared [batch_size, 2]. The variant then reads as another
model beside its original (the operator profile's comparison refused it), though it computes
the same thing. The declaration is the file's word on its outputs; a pass whose purpose is not
to change it (`PassInfo.changes_outputs`: free-dims, dynamic batch) hands it on unchanged.

Kept per output, matched by name: its shape as declared (rank and dims, or no shape at all).
Its element type is the pass's (an FP16 pass that does not keep float32 at the edges changes it
on purpose); an output the input file does not declare is left as the pass wrote it.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from google.protobuf.message import DecodeError


def keep_declared_outputs(source: Path, target: Path) -> int:
    """Give `target`'s graph outputs the shapes `source` declares, in place; returns how many
    changed (0: `target` is not written). External data stays where `target` names it. A
    `target` that does not parse as ONNX is left as it is: intake's checks refuse it next."""
    declared = {v.name: v.type for v in onnx.load(source, load_external_data=False).graph.output}
    try:
        proto = onnx.load(target, load_external_data=False)
    except DecodeError:
        return 0
    changed = 0
    for value in proto.graph.output:
        old = declared.get(value.name)
        if old is None or not _tensor(old) or not _tensor(value.type):
            continue
        if _shape(old) == _shape(value.type):
            continue
        value.type.tensor_type.ClearField("shape")
        if old.tensor_type.HasField("shape"):
            value.type.tensor_type.shape.CopyFrom(old.tensor_type.shape)
        changed += 1
    if changed:
        onnx.save_model(proto, target)
    return changed


def _tensor(value: onnx.TypeProto) -> bool:
    return value.HasField("tensor_type")


def _shape(value: onnx.TypeProto) -> onnx.TensorShapeProto | None:
    tensor = value.tensor_type
    return tensor.shape if tensor.HasField("shape") else None
