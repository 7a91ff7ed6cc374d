"""NNCF reads a model's opset from its first opset import: a CNN at opset 17 that imports
ai.onnx.ml first was refused "ONNX models with opset version < 10 do not support quantization",
with a hint to keep op types in float. The default domain is now put first, and an opset
refusal NNCF still gives says how to get past it."""

from __future__ import annotations

from pathlib import Path

import nncf
import onnx
import pytest
from test_nncf import RandomImages, build_cnn

from optistudio.core.errors import PassFailed
from optistudio.core.passes.base import PassContext
from optistudio.core.passes.nncf_quantize import (
    OPSET_HINT,
    NncfConfig,
    nncf_errors,
    run_int8_nncf,
)


def test_a_model_importing_another_domain_first_is_quantized(tmp_path: Path) -> None:
    model = onnx.load(build_cnn(tmp_path))
    model.opset_import.insert(0, onnx.helper.make_opsetid("ai.onnx.ml", 3))
    onnx.save(model, tmp_path / "ml-first.onnx")
    context = PassContext(work_dir=tmp_path, calibration=RandomImages(batches=1))

    report = run_int8_nncf(
        tmp_path / "ml-first.onnx", tmp_path / "out.onnx", NncfConfig(subset_size=8), context
    )

    assert report.details["qdq_nodes"]["QuantizeLinear"] > 0
    assert report.details["opset"] == {"from": 17, "to": 17}


def test_an_opset_refusal_from_nncf_is_hinted_with_the_way_past_it() -> None:
    with pytest.raises(PassFailed) as refused, nncf_errors():
        raise nncf.ValidationError(
            "ONNX models with opset version < 10 do not support quantization."
        )

    assert refused.value.hint == OPSET_HINT
    assert "int8_nncf_ov" in OPSET_HINT and "ignored_types" not in OPSET_HINT
