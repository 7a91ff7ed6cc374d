"""What intake learns about a model: typed, JSON-serialisable, stored with the model row."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator

Dim = int | str | None
"""A tensor dimension: a fixed size, a symbolic name ("batch"), or None when unnamed."""

ANONYMOUS_DIM_NAMES = frozenset({"", "?"})
"""Dim names that name nothing: exporters write '?' on every dynamic dim, however many differ."""


def is_anonymous(dim: Dim) -> bool:
    """True for a dim that is dynamic without a name of its own: a negative size (Paddle2ONNX
    writes -1), '?' or an empty name. Such dims are independent of each other."""
    if isinstance(dim, str):
        return dim.strip() in ANONYMOUS_DIM_NAMES
    return isinstance(dim, int) and dim < 0


class TensorSpec(BaseModel):
    """One graph input or output."""

    model_config = ConfigDict(extra="forbid")

    name: str
    dtype: str = Field(description="numpy dtype name, e.g. 'float32', 'int64', 'bool'")
    shape: list[Dim] = Field(description="dimensions; str or None marks a dynamic one")

    @field_validator("shape")
    @classmethod
    def _unnamed_dims_are_none(cls, shape: list[Dim]) -> list[Dim]:
        """Anonymous dims (-1, '?', '') become None, also on cards stored before this rule."""
        return [None if is_anonymous(dim) else dim for dim in shape]

    @property
    def dynamic_dims(self) -> list[int]:
        """Indices of the dimensions that are not fixed sizes."""
        return [i for i, d in enumerate(self.shape) if not isinstance(d, int) or d <= 0]


QUANTIZED_OPS = frozenset(
    {
        "QuantizeLinear",
        "DequantizeLinear",
        "QLinearConv",
        "QLinearMatMul",
        "MatMulInteger",
        "ConvInteger",
        "DynamicQuantizeLinear",
    }
)
"""Op types that only a quantized (INT8) model contains."""
QUANTIZED_FORMATS = (
    ("QDQ", frozenset({"QuantizeLinear", "DequantizeLinear"})),
    ("QLinear", frozenset({"QLinearConv", "QLinearMatMul"})),
    ("ConvInteger", frozenset({"ConvInteger", "MatMulInteger", "DynamicQuantizeLinear"})),
)
"""How a quantized graph is written, by the ops that mark each way: Quantize/DequantizeLinear
pairs around float ops (QDQ), quantized operators (QLinear*), or integer ops fed by dynamic
quantization (ConvInteger / MatMulInteger)."""


def quantized_formats(op_histogram: Mapping[str, int]) -> list[str]:
    """The ways the graph is quantized ('QDQ', 'QLinear', 'ConvInteger'), in that order."""
    ops = set(op_histogram)
    return [name for name, marks in QUANTIZED_FORMATS if marks & ops]


def quantized_note(op_histogram: Mapping[str, int]) -> str:
    """'already quantized (QDQ)' for a graph holding quantization ops; '' for one without."""
    formats = quantized_formats(op_histogram)
    return f"already quantized ({' / '.join(formats)})" if formats else ""


def precision_label(precision: str | None, op_histogram: Mapping[str, int]) -> str:
    """A model's precision as every label shows it: the stored precision ('fp32' by default
    for an upload), saying 'already quantized (QDQ)' where the file holds quantization ops
    that the stored precision does not name (an INT8 file uploaded as it was)."""
    stored = precision or "fp32"
    note = quantized_note(op_histogram)
    if not note or stored.startswith(("int", "uint")):
        return stored
    return note if stored == "fp32" else f"{stored}, {note}"


class ModelInfo(BaseModel):
    """The model card: everything intake checks and counts."""

    model_config = ConfigDict(extra="forbid")

    sha256: str
    size_bytes: int = Field(description="size of the .onnx file plus any external data")
    ir_version: int
    opsets: dict[str, int] = Field(description="domain ('' is ai.onnx) to opset version")
    producer: str = ""
    graph_name: str = ""
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    op_histogram: dict[str, int] = Field(description="op type to node count, most common first")
    node_count: int
    parameter_count: int = Field(
        description="elements of every stored tensor and of the weights the graph generates "
        "from constants (optistudio.core.model.parameters)"
    )
    flops_estimate: int | None = Field(
        default=None,
        description="multiply-adds x2 for one sample (dynamic dims at their defaults); "
        "None when shapes could not be inferred",
    )
    external_data: bool = False
    metadata_keys: list[str] = Field(
        default_factory=list,
        description="keys of the model's metadata_props (e.g. 'character': a PP-OCR "
        "recognizer's alphabet), hints for its input profile",
    )
    warnings: list[str] = Field(default_factory=list)

    @property
    def opset(self) -> int:
        return self.opsets.get("", self.opsets.get("ai.onnx", 0))

    @property
    def quantized(self) -> bool:
        """True when the graph holds quantization ops (a QDQ, QOperator or dynamic INT8 model)."""
        return bool(QUANTIZED_OPS & set(self.op_histogram))

    @property
    def quantized_note(self) -> str:
        """'already quantized (QDQ)' for a quantized graph, '' otherwise (the card's fact)."""
        return quantized_note(self.op_histogram)
