"""onnxslim on files as real exporters write them: an IR-3 file stays valid for its IR (the
INT8 passes' opset upgrade reads it), and a ZipMap output's type is kept, not broken."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort
from export_models import ir3_model, zipmap_model

from optistudio.core.passes.base import PassContext, PassReport, passes


def simplify(model: Path, out: Path) -> PassReport:
    return passes.get("simplify").run(model, out, {}, PassContext(work_dir=out.parent))


def test_an_ir3_file_whose_weights_onnxslim_unlists_is_raised_to_ir4(tmp_path: Path) -> None:
    report = simplify(ir3_model(tmp_path / "legacy.onnx"), tmp_path / "slim.onnx")

    slim = onnx.load(report.output)
    assert [value.name for value in slim.graph.input] == ["data_0"]  # onnxslim unlisted them
    assert slim.ir_version == 4
    onnx.checker.check_model(slim)
    onnx.version_converter.convert_version(slim, 13)  # "Input conv1_w_0 is undefined!" before


def test_a_zipmap_output_keeps_its_type(tmp_path: Path) -> None:
    model = zipmap_model(tmp_path / "forest.onnx")

    report = simplify(model, tmp_path / "slim.onnx")

    assert report.output == model
    assert "kept as it was" in report.warnings[0]
    ort.InferenceSession(str(report.output))  # "Invalid tensor data type 0" before
