"""How a bundle's model is run: the backend its variant was made for, what it computes in, and
the threads it was measured at, carried into every part that runs it.

The studio times an OpenVINO variant with an explicit INFERENCE_PRECISION_HINT (f32 for FP32
and INT8 variants, bf16 or f16 for the precision recipes), so the bundle compiles the IR with
the same hint (`openvino/compile_config.json`, read by `openvino/run.py`). Triton's openvino
backend takes fewer settings (HINT_BF16, INFERENCE_NUM_THREADS, NUM_STREAMS,
PERFORMANCE_HINT): BF16 and the threads reach its config.pbtxt; what it cannot say (FP16, or
F32 on a CPU where OpenVINO defaults to BF16) is written in the manifest's note, not faked.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.backends.base import Precision

REFERENCE_BACKEND = "onnxruntime"
OPENVINO = "openvino"
OPENVINO_HINTS: dict[str, str] = {"fp32": "f32", "bf16": "bf16", "fp16": "f16", "int8": "f32"}
"""Our inference precision -> OpenVINO's INFERENCE_PRECISION_HINT (as the studio times it)."""
BACKEND_NAMES = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO", "tensorrt": "TensorRT"}


class RunSettings(BaseModel):
    """Where and how the bundle's model runs, as its variant was measured."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = Field(
        default=REFERENCE_BACKEND, description="The backend the variant was made and timed on."
    )
    precision: str = Field(
        default="fp32",
        description="What the variant computes in: 'fp32', 'int8', 'bf16', 'int8+bf16' (its "
        "INT8 layers in INT8, the rest in BF16), ...",
    )
    inference_precision: Precision | None = Field(
        default=None,
        description="The backend's inference precision setting it ran at (OpenVINO's "
        "INFERENCE_PRECISION_HINT: 'bf16', 'fp16', 'fp32'); None on a backend without one.",
    )
    threads: int | None = Field(
        default=None, description="Intra-op threads it was measured at; None: the default."
    )

    def threads_text(self) -> str:
        """'2 threads', '1 thread' or 'default threads'."""
        if not self.threads:
            return "default threads"
        return f"{self.threads} thread{'s' if self.threads != 1 else ''}"

    def said(self) -> str:
        """'BF16 inference on OpenVINO, default threads'."""
        name = BACKEND_NAMES.get(self.backend, self.backend)
        return f"{self.precision.upper()} inference on {name}, {self.threads_text()}"


def run_settings(
    *,
    recipe: dict[str, Any] | None,
    precision: str,
    backend: str | None,
    target: str | None = None,
    threads: int | None = None,
) -> RunSettings:
    """The run settings of a stored model: the backend its row names, else its recipe's, else
    its optimize run's `target` (an original, or 'any': ONNX Runtime, where it was measured);
    the inference precision its recipe asked for (OpenVINO: f32 when it asked for none)."""
    chosen = backend or (recipe or {}).get("backend") or target
    chosen = chosen if chosen and chosen != "any" else REFERENCE_BACKEND
    asked = (recipe or {}).get("precision")
    inference = (asked or "fp32") if chosen == OPENVINO else asked
    return RunSettings(
        backend=chosen, precision=precision, inference_precision=inference, threads=threads
    )


def openvino_config(run: RunSettings) -> dict[str, str]:
    """The properties the bundle's IR is compiled with: the precision hint the variant was
    timed at (f32 for a model that was not made on OpenVINO: what ONNX Runtime computed),
    and its threads."""
    hint = OPENVINO_HINTS[run.inference_precision or "fp32"]
    config = {"INFERENCE_PRECISION_HINT": hint}
    if run.threads:
        config["INFERENCE_NUM_THREADS"] = str(run.threads)
    return config


def triton_parameters(run: RunSettings) -> dict[str, str]:
    """config.pbtxt parameters for Triton's openvino backend (none for another backend)."""
    if run.backend != OPENVINO:
        return {}
    parameters = {"HINT_BF16": "YES"} if run.inference_precision == "bf16" else {}
    if run.threads:
        parameters["INFERENCE_NUM_THREADS"] = str(run.threads)
    return parameters


def triton_note(run: RunSettings) -> str:
    """What Triton's config cannot say about the run ('' when it says everything)."""
    if run.backend != OPENVINO or run.inference_precision == "bf16":
        return ""
    return (
        f"Triton's openvino backend has no setting for {run.inference_precision or 'fp32'} "
        "inference (only HINT_BF16): it serves at OpenVINO's default for the CPU (BF16 where "
        "the CPU computes it), which is not how this variant was measured; openvino/run.py "
        f"compiles the IR at {OPENVINO_HINTS[run.inference_precision or 'fp32']} as measured."
    )


def manifest_entry(run: RunSettings) -> dict[str, Any]:
    """The manifest's "runs_as": backend, precision, threads and how each part runs it."""
    return run.model_dump() | {
        "said": run.said(),
        "openvino_compile_config": openvino_config(run),
        "triton_parameters": triton_parameters(run),
        "note": triton_note(run),
    }


def openvino_run_script(name: str) -> str:
    """openvino/run.py: compiles `<name>.xml` with compile_config.json (the precision hint and
    threads the variant was measured at) and runs it once on an .npz or on zeros."""
    return RUN_SCRIPT.replace("__NAME__", json.dumps(f"{name}.xml"))


RUN_SCRIPT = '''"""Run the bundle's OpenVINO IR as the studio measured it.

    python run.py [INPUTS.npz] [--device CPU]

Compiles the IR with compile_config.json (INFERENCE_PRECISION_HINT, INFERENCE_NUM_THREADS),
feeds the .npz's arrays by input name (zeros at the IR's static shapes without one) and prints
each output's name, shape and dtype. Needs `pip install openvino numpy`.
"""

import argparse
import json
from pathlib import Path

import numpy as np
import openvino as ov

HERE = Path(__file__).resolve().parent
MODEL = HERE / __NAME__


def compiled(device):
    config = json.loads((HERE / "compile_config.json").read_text())
    return ov.Core().compile_model(str(MODEL), device, config)


def feeds(model, path):
    if path:
        with np.load(path) as arrays:
            return {name: arrays[name] for name in arrays.files}
    return {port.any_name: zeros(port) for port in model.inputs}


def zeros(port):
    """Zeros at the input's shape, a dynamic dim at 1."""
    shape = [dim.get_length() if dim.is_static else 1 for dim in port.get_partial_shape()]
    return np.zeros(shape, port.get_element_type().to_dtype())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("inputs", nargs="?", help=".npz of the inputs by name")
    parser.add_argument("--device", default="CPU")
    args = parser.parse_args()
    model = compiled(args.device)
    print("compiled at", model.get_property("INFERENCE_PRECISION_HINT").get_type_name())
    results = model(feeds(model, args.inputs))
    for port in model.outputs:
        value = results[port]
        print(port.any_name, value.shape, value.dtype)


if __name__ == "__main__":
    main()
'''
