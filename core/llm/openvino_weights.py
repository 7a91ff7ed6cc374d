"""Weight-only compression of a decoder for OpenVINO with NNCF (`nncf.compress_weights`).

The ONNX decoder is converted to OpenVINO's graph, then NNCF quantizes each MatMul weight in
groups of `group_size` along its input dimension (INT4: 16 levels per group with its own scale
and, asymmetric, zero point; INT8: per output channel). By NNCF's default the embedding and the
last layer (the LM head) stay at 8 bits (`all_layers=False`, backup INT8_ASYM) when the rest
goes to 4. OpenVINO's CPU plugin unpacks the weights inside its fused MatMul kernels. The
result is an IR (.xml + .bin) with the ONNX input and output names, so the decoding loop feeds
it as it fed the original.

Before NNCF runs, the converted graph is checked for what would fail later with NNCF's or
OpenVINO's own words: an operator OpenVINO's IR files cannot hold (ONNX Runtime GenAI's builder
writes com.microsoft GroupQueryAttention, which OpenVINO converts to an operator of its
"extension" set: compiled in memory, but an IR holding it cannot be read back), and an operator
output of dynamic element type (the same conversion leaves the attention's absent inputs as
placeholders of dynamic type, and NNCF refuses any: "not yet supported OpenVINO data type:
dynamic"). Either makes the recipe not apply to this decoder (`NotForOpenVINO`), in one sentence
naming the operator, before any work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.errors import BackendUnavailable, PassFailed, first_line
from optistudio.core.llm.weight_only import copy_configs

logger = logging.getLogger(__name__)

IR_OPSETS = "opset"
"""Operators from OpenVINO's numbered opsets (version ids opset1, opset13...) are what its IR
files hold; others ("extension") exist only in memory."""


class NotForOpenVINO(PassFailed):
    """The converted decoder holds an operator OpenVINO's IR cannot hold, or an output of
    dynamic element type NNCF cannot read: the recipe does not apply to this graph (not a
    failure of the run)."""


class NNCFWeightsConfig(BaseModel):
    """Settings of nncf.compress_weights for a decoder."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["int4_asym", "int4_sym", "int8_asym", "int8_sym"] = Field(
        default="int4_asym", description="NNCF's CompressWeightsMode for the weights."
    )
    group_size: int = Field(
        default=128, ge=-1, description="Weights per INT4 scale (-1 = per output channel)."
    )
    ratio: float = Field(
        default=1.0, gt=0, le=1, description="Share of the layers at 4 bits; the rest at 8."
    )
    all_layers: bool = Field(
        default=False, description="Also the embedding and LM head at 4 bits (default: 8)."
    )


def compress_for_openvino(
    source: Path, target: Path, config: NNCFWeightsConfig | None = None
) -> Path:
    """Write `source` (ONNX) compressed as OpenVINO IR to `target` (.xml); returns `target`."""
    config = config or NNCFWeightsConfig()
    os.environ.setdefault("NNCF_CI", "1")
    ov, nncf = _import()
    model = ov.convert_model(str(source))
    check_for_nncf(model, ov.get_version())
    try:
        with contextlib.redirect_stdout(sys.stderr):  # NNCF prints its tables and progress bar
            compressed = nncf.compress_weights(model, **_arguments(nncf, config))
    except Exception as exc:  # NNCF raises its own untyped errors
        raise PassFailed(
            f"NNCF could not compress this decoder's weights: {first_line(exc)}",
            hint="Try group_size -1 (per channel) or mode int8_asym.",
        ) from exc
    target.parent.mkdir(parents=True, exist_ok=True)
    ov.save_model(compressed, str(target), compress_to_fp16=False)
    copy_configs(source.parent, target.parent)
    return target


def check_for_nncf(model: Any, version: str) -> None:
    """NotForOpenVINO naming the first operator outside OpenVINO's IR opsets, else the first
    with an output of dynamic element type; `version`: OpenVINO's, for the sentence."""
    ops = list(model.get_ordered_ops())
    for op in ops:
        if not op.get_type_info().version_id.startswith(IR_OPSETS):
            raise NotForOpenVINO(
                "NNCF's weight compression for OpenVINO does not apply to this decoder: "
                f"OpenVINO {version.split('-')[0]} converts its {op.get_type_name()} to an "
                "operator its IR files cannot hold.",
                hint=_HINT,
            )
    for op in ops:
        if any(output.get_element_type().is_dynamic() for output in op.outputs()):
            raise NotForOpenVINO(
                "NNCF's weight compression for OpenVINO does not apply to this decoder: its "
                f"converted graph has an output of undetermined element type "
                f"({op.get_type_name()} {op.get_friendly_name()!r}).",
                hint=_HINT,
            )


_HINT = (
    "Use the ONNX Runtime weight-only recipes (int4_weight_only, int8_weight_only), which "
    "keep the graph as it is."
)


def _arguments(nncf: Any, config: NNCFWeightsConfig) -> dict[str, Any]:
    mode = nncf.CompressWeightsMode(config.mode)
    if config.mode.startswith("int8"):
        return {"mode": mode}
    return {
        "mode": mode,
        "group_size": config.group_size,
        "ratio": config.ratio,
        "all_layers": config.all_layers,
    }


def _import() -> tuple[Any, Any]:
    try:
        import nncf
        import openvino as ov
    except ImportError as exc:
        raise BackendUnavailable(
            f"Compressing weights for OpenVINO needs openvino and nncf ({exc}).",
            hint="pip install openvino nncf",
        ) from exc
    return ov, nncf
