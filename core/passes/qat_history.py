"""The per-epoch line quantization-aware training reports as progress, and its reader.

The job row keeps only the latest progress message, so that message carries the whole history:

    epoch 3/8 · loss 0.412 → 0.233 → 0.201 · val top-1 0.951 → 0.968 → 0.970 → 0.972

Validation has one more value than loss: the first is the fake-quantized model before training
(what post-training quantization gives). The Jobs page charts it with `read_history`.
"""

from __future__ import annotations

import re

ARROW = " → "
_LINE = re.compile(
    r"epoch (?P<epoch>\d+)/(?P<epochs>\d+) · loss (?P<loss>[^·]*?) · val (?P<metric>.+?) "
    r"(?P<val>-?\d[-\d.e+ →]*)$"
)


def history_line(
    epoch: int, epochs: int, losses: list[float], metric: str, val: list[float]
) -> str:
    """The message for epoch `epoch` of `epochs` (see the module docstring)."""
    loss_text = ARROW.join(f"{v:.4g}" for v in losses) or "-"
    val_text = ARROW.join(f"{v:.4g}" for v in val)
    return f"epoch {epoch}/{epochs} · loss {loss_text} · val {metric} {val_text}"


def read_history(message: str) -> dict[str, list[float]] | None:
    """{'epoch', 'loss', metric name} columns from a progress message, None when it holds no
    history. Loss at epoch 0 (before training) is NaN."""
    found = _LINE.search(message or "")
    if found is None:
        return None
    try:
        val = [float(v) for v in found["val"].split(ARROW.strip()) if v.strip()]
        loss_text = found["loss"].strip()
        loss = [] if loss_text == "-" else [float(v) for v in loss_text.split(ARROW.strip())]
    except ValueError:
        return None
    loss = [float("nan")] * (len(val) - len(loss)) + loss
    return {"epoch": list(range(len(val))), "train loss": loss, f"val {found['metric']}": val}
