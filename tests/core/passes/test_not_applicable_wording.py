"""The not-applicable sentence of a quantized graph ONNX Runtime cannot load names the model
once: it read "static INT8 made a model that ONNX Runtime could not load this model: Node ..."
(basic_pitch's tf2onnx Transpose), the load error's own lead pasted after the pass's."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.backends.blame import load_cause
from optistudio.core.optimize.recipes import BUILTIN_RECIPES
from optistudio.core.optimize.run import VariantResult, set_outcome
from optistudio.core.passes.prepare import GraphNotApplicable, finish_quantized
from tests.core.passes.exporter_graphs import custom_op_model


def test_the_sentence_names_the_pass_the_runtime_and_the_cause_once(tmp_path: Path) -> None:
    unloadable = custom_op_model(tmp_path / "out.onnx")
    variant = VariantResult(recipe=BUILTIN_RECIPES["int8_static"], precision="int8")

    with pytest.raises(GraphNotApplicable) as caught:
        finish_quantized(unloadable, "static INT8")
    set_outcome(variant, caught.value)
    said = variant.why_not_applicable()

    assert said.startswith(
        "not applicable to this graph: static INT8 made a model ONNX Runtime cannot load: "
    )
    assert "NoSuchOp" in said
    assert said.count("this model") == 0 and said.count("could not load") == 0


@pytest.mark.parametrize(
    ("message", "cause"),
    [
        pytest.param("ONNX Runtime could not load this model: bad perm", "bad perm", id="ort"),
        pytest.param("OpenVINO could not load this model: dynamic rank", "dynamic rank", id="ov"),
        pytest.param("Something else: kept", "Something else: kept", id="other"),
    ],
)
def test_load_cause_drops_the_runtime_lead_only(message: str, cause: str) -> None:
    assert load_cause(message) == cause
