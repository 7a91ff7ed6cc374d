"""The KServe v2 inference protocol's JSON bodies (what Triton's HTTP clients send and read).

An infer request is `{"id"?, "parameters"?, "inputs": [{"name", "shape", "datatype", "data"}],
"outputs"?: [{"name"}]}`; "data" holds the tensor's elements row-major, flat or nested. With the
binary tensor extension (tritonclient's default) the body is that JSON, `Inference-Header-
Content-Length` bytes long, followed by each input whose "parameters" give a
`binary_data_size`, in order, as raw little-endian bytes. A response is always JSON:
`{"model_name", "model_version", "id"?, "parameters", "outputs": [{"name", "shape",
"datatype", "data"}]}`; tritonclient's `as_numpy` reads "data" whether or not it asked for
binary outputs. BYTES (strings) and BF16 tensors are refused by name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np

from optistudio.core.batching.pipeline_file import PipelineFile, PipelineTensor
from optistudio.core.errors import InvalidSpec

VERSION = "1"
DATATYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "UINT16": "uint16",
    "UINT32": "uint32",
    "UINT64": "uint64",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
}
"""v2 datatype -> numpy dtype name, for every type this server carries."""
V2_NAMES = {dtype: name for name, dtype in DATATYPES.items()}


def datatype(dtype: str) -> str:
    """The v2 datatype of a numpy dtype name ('float32' -> 'FP32'); BYTES for anything else."""
    return V2_NAMES.get(dtype, "BYTES")


def tensor_metadata(tensor: PipelineTensor) -> dict[str, Any]:
    """A tensor as model metadata lists it: a dynamic dim is -1."""
    shape = [dim if isinstance(dim, int) and dim > 0 else -1 for dim in tensor.shape]
    return {"name": tensor.name, "datatype": datatype(tensor.dtype), "shape": shape}


def model_metadata(document: PipelineFile) -> dict[str, Any]:
    """GET /v2/models/{name}: the model's name, version, platform and tensors."""
    return {
        "name": document.name,
        "versions": [VERSION],
        "platform": f"optistudio_{document.backend}",
        "inputs": [tensor_metadata(t) for t in document.inputs],
        "outputs": [tensor_metadata(t) for t in document.outputs],
    }


def parse_request(body: bytes, header_length: int | None) -> tuple[dict[str, Any], bytes]:
    """The request's JSON part and the binary bytes after it (empty without the extension)."""
    head, rest = (body[:header_length], body[header_length:]) if header_length else (body, b"")
    try:
        request = json.loads(head)
    except ValueError as exc:
        raise InvalidSpec(f"The infer request is not JSON: {exc}.") from None
    if not isinstance(request, dict) or not isinstance(request.get("inputs"), list):
        raise InvalidSpec('An infer request is a JSON object with an "inputs" list.')
    return request, rest


def decode_inputs(request: dict[str, Any], binary: bytes) -> dict[str, np.ndarray]:
    """The request's tensors by name, from "data" or the binary bytes."""
    feeds, offset = {}, 0
    for entry in request["inputs"]:
        name, dtype, shape = _declared(entry)
        size = (entry.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            array, offset = _binary(name, dtype, binary, offset, size)
        elif "data" in entry:
            array = _listed(name, dtype, entry["data"])
        else:
            raise InvalidSpec(f'Input {name!r} has neither "data" nor binary data.')
        feeds[name] = _shaped(name, array, shape)
    return feeds


def _binary(
    name: str, dtype: np.dtype, binary: bytes, offset: int, size: Any
) -> tuple[np.ndarray, int]:
    """The input's raw bytes after `offset`, and the offset past them."""
    if not isinstance(size, int) or size < 0 or size % dtype.itemsize:
        raise InvalidSpec(f"Input {name!r} declares binary_data_size {size!r}.")
    chunk = binary[offset : offset + size]
    if len(chunk) != size:
        raise InvalidSpec(f"Input {name!r} declares {size} binary bytes; fewer were sent.")
    return np.frombuffer(chunk, dtype=dtype).copy(), offset + size


def _listed(name: str, dtype: np.dtype, data: Any) -> np.ndarray:
    """The input's "data" list as an array of its datatype."""
    try:
        return np.asarray(data, dtype=dtype)
    except (TypeError, ValueError) as exc:
        raise InvalidSpec(f"Input {name!r}'s data does not read as {dtype.name}: {exc}.") from None


def _declared(entry: Any) -> tuple[str, np.dtype, list[int]]:
    if not isinstance(entry, dict) or not {"name", "shape", "datatype"} <= entry.keys():
        raise InvalidSpec('Each input needs "name", "shape" and "datatype".')
    name, kind = str(entry["name"]), str(entry["datatype"])
    if kind not in DATATYPES:
        raise InvalidSpec(
            f"Input {name!r} has datatype {kind}, which this server does not carry.",
            hint=f"Send one of {', '.join(DATATYPES)}.",
        )
    shape = entry["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise InvalidSpec(f"Input {name!r} has shape {shape!r}; a shape is a list of sizes.")
    return name, np.dtype(DATATYPES[kind]), shape


def _shaped(name: str, array: np.ndarray, shape: list[int]) -> np.ndarray:
    if array.size != int(np.prod(shape)):
        raise InvalidSpec(
            f"Input {name!r} has {array.size} elements, but its shape {shape} holds "
            f"{int(np.prod(shape))}."
        )
    return array.reshape(shape)


def requested_outputs(request: dict[str, Any], names: Sequence[str]) -> list[int]:
    """Indices of the outputs to return: those the request names, in its order, else all."""
    asked = request.get("outputs")
    if not asked:
        return list(range(len(names)))
    wanted = [str((entry or {}).get("name")) for entry in asked]
    unknown = [name for name in wanted if name not in names]
    if unknown:
        raise InvalidSpec(
            f"The model has no output {unknown[0]!r}.", hint=f"Its outputs: {', '.join(names)}."
        )
    return [list(names).index(name) for name in wanted]


def infer_response(
    document: PipelineFile,
    request: dict[str, Any],
    outputs: list[np.ndarray],
    parameters: dict[str, Any],
) -> dict[str, Any]:
    """The JSON response: the requested outputs, row-major, with `parameters` (batch size,
    queue and compute time)."""
    names = [tensor.name for tensor in document.outputs]
    response: dict[str, Any] = {
        "model_name": document.name,
        "model_version": VERSION,
        "parameters": parameters,
        "outputs": [_tensor(names[i], outputs[i]) for i in requested_outputs(request, names)],
    }
    if "id" in request:
        response["id"] = request["id"]
    return response


def _tensor(name: str, array: np.ndarray) -> dict[str, Any]:
    return {
        "name": name,
        "shape": list(array.shape),
        "datatype": datatype(array.dtype.name),
        "data": array.reshape(-1).tolist(),
    }
