"""Whether ONNX Runtime loads a model: the last check at upload, so "stored" means "it loads".

Intake (`core/model`, floor 1) checks a file's structure and may not import a runtime; this
module is what the callers that take models in hand it as its `load_check`. The reference CPU
session is made with the graph unoptimized, one thread: loading is the question, not speed.
The catalogue (studio uploads, `bench --save`) runs the same load in a child process under a
time and a memory limit (`isolated_load`), and reads its errors with `load_refusal`.

ONNX Runtime's message names the file it loaded (a server path) and sometimes its own source
lines, so the refusal is rebuilt from what the message says: an operator no backend here
implements (named with its domain; for ONNX's own domain, whether the model's opset is the
cause), an opset or IR version this runtime does not know, an opset older than it runs, a file
that does not parse, or else its first line with the path and the source location cut out. Only
a cause that is the opset gets advice about the opset. The ONNX Runtime backend reads its own
load failures the same way (`known_cause`), so a benchmark says what the upload would have.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import onnx

from optistudio.core.backends.reference import reference_session
from optistudio.core.errors import ModelRejected

ORT_MIN_OPSET = 7
"""ONNX Runtime runs ai.onnx opset 7 and later."""

_DEFAULT_DOMAINS = ("", "ai.onnx")

_UNREGISTERED_OP = (
    re.compile(r"(?P<domain>[\w.-]*):(?P<op>\w+)\(-?\d+\) is not a registered function/op"),
    re.compile(
        r"\(\"[^\"]*\", (?P<op>\w+), \"(?P<domain>[\w.-]*)\", -?\d+\)"
        r".*(?:No Op registered|is deprecated)",
        re.S,
    ),
)
_NEW_OPSET = re.compile(
    r"Opset (?P<opset>\d+) is under development.*?support for domain (?P<domain>\S+) is till "
    r"opset (?P<newest>\d+)",
    re.S,
)
_NEW_IR = re.compile(
    r"Unsupported model IR version: (?P<ir>\d+), max supported IR version: (?P<newest>\d+)"
)
_NOT_PROTOBUF = re.compile(r"INVALID_PROTOBUF|Protobuf parsing failed")
_NO_KERNEL = re.compile(r"Could not find an implementation for (?P<op>\w+)\((?P<version>\d+)\)")
_RUNTIME_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_LOAD_PREFIX = re.compile(r"^Load model from .*? failed:\s*", re.S)
_SOURCE_LOCATION = re.compile(r"\S+\.(?:h|cc|cpp|cu):\d+ (?:.*?\)|\w+) (?=[A-Z])", re.S)
_LIMIT = 400


def check_loads(path: Path) -> None:
    """Raise ModelRejected, naming the cause, when ONNX Runtime's CPU provider cannot load `path`.

    The message and hint name the file by its name alone, never its folder."""
    try:
        reference_session(Path(path), threads=1, spin_wait=False, quiet=True)
    except Exception as exc:  # ONNX Runtime raises its own untyped errors
        raise load_refusal(str(exc), Path(path)) from None


def load_refusal(message: str, path: Path) -> ModelRejected:
    """The refusal for ONNX Runtime's load error `message` about the model at `path`."""
    return known_cause(message, path) or ModelRejected(
        f"ONNX Runtime could not load the model: {cleaned_message(message, path)}",
        hint="Check the model with onnx.checker.check_model(model, full_check=True) and with "
        "ONNX Runtime on your machine, then export it again.",
    )


def known_cause(message: str, path: Path) -> ModelRejected | None:
    """The refusal when ONNX Runtime's load error `message` says why (an operator, an opset,
    an IR version, a file that is no model); None when it says nothing this module reads."""
    if (match := _unregistered_op(message)) is not None:
        op, domain = match["op"], match["domain"]
        return _custom_op(op, domain) if domain not in _DEFAULT_DOMAINS else _onnx_op(op, path)
    for explain in (_new_opset, _new_ir_version, _not_a_model):
        if (refusal := explain(message)) is not None:
            return refusal
    if _NO_KERNEL.search(message) and 0 < (opset := _default_opset(path)) < ORT_MIN_OPSET:
        return _old_opset(opset)
    return None


def _unregistered_op(message: str) -> re.Match[str] | None:
    return next(filter(None, (pattern.search(message) for pattern in _UNREGISTERED_OP)), None)


def _custom_op(op: str, domain: str) -> ModelRejected:
    return ModelRejected(
        f"The model uses the operator {op} from domain {domain}, which no backend here implements.",
        hint=f"{op} is a custom operator: the model needs a runtime that implements {domain} "
        "(its custom-op library), which is not loaded here, and uploaded code is never run. "
        "Export the model with standard ONNX operators, or replace the node.",
    )


def _onnx_op(op: str, path: Path) -> ModelRejected:
    """An op of ONNX's own domain that this runtime lacks: newer than the model's opset, or none."""
    since = _first_opset(op)
    if since is None:
        return ModelRejected(
            f"The model uses the operator {op} from domain ai.onnx, which ONNX does not define "
            "and no backend here implements.",
            hint="Check the node's op type, or export the model again with standard operators.",
        )
    opset = _default_opset(path)
    if since <= opset:  # deprecated and removed (Upsample, Scatter...)
        return ModelRejected(
            f"The model uses the operator {op} from domain ai.onnx, which ONNX no longer defines "
            f"at opset {opset}.",
            hint=f"Export the model again with a current exporter, which writes no {op}.",
        )
    return ModelRejected(
        f"The model uses the operator {op} from domain ai.onnx, which ONNX defines from opset "
        f"{since} on, but the model imports opset {opset}.",
        hint=f"Export the model again with opset {since} or later.",
    )


def _first_opset(op: str) -> int | None:
    versions = [
        schema.since_version
        for schema in onnx.defs.get_all_schemas_with_history()
        if schema.name == op and schema.domain in _DEFAULT_DOMAINS
    ]
    return min(versions, default=None)


def _new_opset(message: str) -> ModelRejected | None:
    if (match := _NEW_OPSET.search(message)) is None:
        return None
    return ModelRejected(
        f"The model uses opset {match['opset']} of domain {match['domain']}, newer than this "
        f"ONNX Runtime supports (up to opset {match['newest']}).",
        hint=f"Export the model again with opset {match['newest']} or lower.",
    )


def _new_ir_version(message: str) -> ModelRejected | None:
    if (match := _NEW_IR.search(message)) is None:
        return None
    return ModelRejected(
        f"The model's IR version {match['ir']} is newer than this ONNX Runtime reads "
        f"(up to {match['newest']}).",
        hint="Save the model again with an onnx package that writes an older IR version.",
    )


def _not_a_model(message: str) -> ModelRejected | None:
    if not _NOT_PROTOBUF.search(message):
        return None
    return ModelRejected(
        "The file is not an ONNX model ONNX Runtime can read: its contents do not parse.",
        hint="Check that the file is complete (not cut short, not a Git LFS pointer) and is an "
        ".onnx model; save it again with onnx.save.",
    )


def _old_opset(opset: int) -> ModelRejected:
    return ModelRejected(
        f"The model uses opset {opset}; ONNX Runtime runs opset {ORT_MIN_OPSET} and later.",
        hint="Convert it with onnx.version_converter.convert_version(model, 13), or export it "
        "again with a current exporter.",
    )


def _default_opset(path: Path) -> int:
    """The model's ai.onnx opset; 0 for a file onnx cannot read."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # onnx raises protobuf's DecodeError and others: no opset to blame
        return 0
    return next((o.version for o in model.opset_import if o.domain in _DEFAULT_DOMAINS), 0)


def cleaned_message(message: str, path: Path) -> str:
    """The first line of ONNX Runtime's message, without its prefixes, source lines or path."""
    text = _LOAD_PREFIX.sub("", _RUNTIME_PREFIX.sub("", message.strip()))
    text = _SOURCE_LOCATION.sub("", text)
    for named in sorted({str(path), str(path.absolute()), str(path.resolve())}, key=len)[::-1]:
        text = text.replace(named, path.name)
    for folder in {str(path.parent.absolute()), str(path.parent.resolve())}:
        text = text.replace(folder + os.sep, "")
    lines = text.strip().splitlines()
    return lines[0][:_LIMIT] if lines else "no reason given"
