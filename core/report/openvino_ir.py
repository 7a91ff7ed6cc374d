"""The bundle's OpenVINO part, and the bundle of a variant that exists only as an OpenVINO IR.

openvino/<name>.xml + .bin is the model converted by OpenVINO (`ov.convert_model`), or the IR
itself for a variant that is one, with compile_config.json (the precision hint and threads the
variant was measured at, core.report.run_settings) and run.py compiling it with them.

A variant that is an IR (NNCF's INT8 on the OpenVINO model) is an .xml with its .bin, quantized on OpenVINO's own graph: there is no ONNX file
of it, so the parts made from ONNX (model/ for ONNX Runtime and its CANN provider, Core ML,
LiteRT, a TensorRT engine) are left out, each with the one sentence `only_ir` says. The IR goes
into the OpenVINO part as it is (openvino/<name>.xml + .bin, compiled by run.py at the precision
hint it was measured at) and into the Triton repository as Triton's openvino backend reads it
(`1/model.xml` + `1/model.bin`); pipeline.json names the IR as its model.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, Protocol

from optistudio.core.errors import first_line
from optistudio.core.model.content_address import IR_SUFFIX, ir_files
from optistudio.core.report.run_settings import RunSettings, openvino_config, openvino_run_script

FORMAT = "openvino_ir"
"""pipeline.json's "format" of an IR-only bundle."""
TRITON_FILE = "model.xml"
"""The file name Triton's openvino backend reads in the version folder (weights: model.bin)."""
LEFT_OUT = ("model", "cann", "tensorrt", "coreml", "litert")
"""The bundle's parts made from the ONNX file, which an IR-only variant has not."""
RUNS_ON = "OpenVINO Runtime (Intel CPU, GPU, NPU): the IR measured here"


class Members(Protocol):
    """The bundle's writer, as this module uses it."""

    def add_file(self, arcname: str, path: Path) -> None: ...

    def add_text(self, arcname: str, text: str) -> None: ...

    def add_json(self, arcname: str, data: Any) -> None: ...


def is_ir(model_path: Path) -> bool:
    """Whether the bundle's model is an OpenVINO IR (.xml) rather than ONNX."""
    return Path(model_path).suffix == IR_SUFFIX


def only_ir(name: str) -> str:
    """The one sentence every part made from ONNX says for an IR-only variant."""
    return (
        f"This variant exists only as OpenVINO IR (openvino/{name}.xml + .bin, quantized by "
        "NNCF on OpenVINO's graph): there is no ONNX file of it for ONNX Runtime or the "
        "converters, so serve it with OpenVINO or Triton's openvino backend."
    )


def left_out(name: str) -> dict[str, str]:
    """The skipped parts of an IR-only bundle, each with `only_ir`'s sentence."""
    return dict.fromkeys(LEFT_OUT, only_ir(name))


def add_openvino(
    model_path: Path, run: RunSettings, name: str, members: Members, skipped: dict[str, str]
) -> None:
    """openvino/: the IR (converted, or the variant's own) with compile_config.json and run.py;
    `skipped` says why not when OpenVINO is missing or cannot convert the model."""
    try:
        import openvino as ov
    except ImportError:
        skipped["openvino"] = "OpenVINO is not installed here (pip install openvino)."
        return
    if is_ir(model_path):  # the IR itself, as it was stored and measured
        _add_ir(model_path, run, name, members)
        return
    folder = Path(tempfile.mkdtemp(prefix="optistudio-ir-"))
    try:
        model = ov.convert_model(str(model_path))
        ov.save_model(model, str(folder / f"{name}.xml"), compress_to_fp16=False)
        del model
        _add_ir(folder / f"{name}.xml", run, name, members)
    except Exception as exc:  # OpenVINO raises its own RuntimeError subclasses for bad ops
        skipped["openvino"] = f"OpenVINO could not convert this model: {first_line(exc)}"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _add_ir(model_path: Path, run: RunSettings, name: str, members: Members) -> None:
    """openvino/<name>.xml + .bin, compile_config.json (the precision hint and threads it was
    measured at) and run.py compiling the IR with it."""
    for path in ir_files(model_path):
        members.add_file(f"openvino/{name}{path.suffix}", path)
    members.add_json("openvino/compile_config.json", openvino_config(run))
    members.add_text("openvino/run.py", openvino_run_script(name))


def add_triton_files(model_path: Path, folder: str, members: Members) -> None:
    """`<folder>/1/model.xml` + `model.bin`, as Triton's openvino backend reads them."""
    for path in ir_files(model_path):
        members.add_file(f"{folder}/1/{Path(TRITON_FILE).with_suffix(path.suffix)}", path)
