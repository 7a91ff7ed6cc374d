"""The int8_static options a pass built on it passes through (int8_mixed, int8_placed)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from optistudio.core.numerics.calibration import CalibrationMethod


class StaticInt8Options(BaseModel):
    """How the static INT8 underneath is calibrated and how its weights are quantized."""

    model_config = ConfigDict(extra="forbid")

    calibration: CalibrationMethod = Field(
        "minmax", description="How activation ranges are chosen (as in int8_static)."
    )
    per_channel: bool = Field(
        True, description="One scale per output channel of each weight instead of per tensor."
    )
    reduce_range: bool | None = Field(
        None, description="7-bit weights (as in int8_static; default: decided by the CPU)."
    )
