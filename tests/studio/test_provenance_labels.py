"""Provenance on every figure: 'your data' only for the user's data; built-in and random
samples named as such on the Optimize page's rows, its warning and the Compare page's notes;
the budget box suggests the metrics of the task being judged, never another task's.

The real case: variants of an audio model judged on 32 random inputs showed "samples: your
data", and its budget box suggested CTC's string_agreement=0.99, cer=0.01."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from audio_models import build_audio_model

from optistudio.core.optimize.provenance import data_label, samples_label
from optistudio.core.optimize.variant import VariantResult
from optistudio.services.jobkinds import OPTIMIZE
from optistudio.studio import optimize_services

RECIPE = {"name": "fp16", "label": "FP16", "steps": []}


def accuracy(data: str) -> dict[str, Any]:
    figures = {"samples": 32, "data": data, "max_abs_error": 0.01, "mean_abs_error": 0.001}
    figures |= {"mean_cosine": 0.9999, "min_cosine": 0.999, "nan_or_inf": False}
    return figures | {"per_output_max_abs_error": {}}


def variant(data: str | None, **marks: Any) -> VariantResult:
    fields: dict[str, Any] = {"recipe": RECIPE, "precision": "fp16", "backend": "onnxruntime"}
    if data is not None:
        fields["accuracy"] = accuracy(data)
    return VariantResult.model_validate(fields | marks)


@pytest.mark.parametrize(
    ("made", "label"),
    [
        (variant("user"), "your data"),
        (variant("synthetic"), "judged on random inputs, not your data"),
        (
            variant("synthetic", calibrated_on_random=True),
            "calibrated and judged on random inputs, not your data",
        ),
        (
            variant("builtin", builtin_samples="calibrated and judged"),
            "calibrated and judged on built-in samples, not your data",
        ),
        (variant(None), "not judged"),
    ],
    ids=["user", "random", "random-calibrated", "builtin", "failed"],
)
def test_only_the_users_samples_read_your_data(made: VariantResult, label: str) -> None:
    assert samples_label(made) == label
    assert optimize_services.samples_of(made) == label


def test_a_run_judged_on_random_inputs_warns_though_nothing_was_calibrated_on_them() -> None:
    result = OPTIMIZE.parse_result(
        {
            "spec": {"recipes": ["fp16"]},
            "data": "synthetic",
            "variants": [variant("synthetic").model_dump(mode="json")],
            "chosen": None,
        }
    )

    rows = optimize_services.variant_rows(result)

    assert rows[0]["samples"] == "judged on random inputs, not your data"
    assert optimize_services.not_your_data(result).startswith("Judged on random inputs")


@pytest.mark.parametrize(
    ("data", "label"),
    [("user", "your data"), ("builtin", "built-in samples, not your data")]
    + [("synthetic", "random inputs, not your data"), (None, "no accuracy report")],
    ids=["user", "builtin", "random", "none"],
)
def test_the_compare_notes_name_the_samples(data: str | None, label: str) -> None:
    assert data_label(data) == label


def test_a_model_with_no_task_is_suggested_no_other_tasks_budget(tmp_path: Path) -> None:
    audio = optimize_services.task_hint(build_audio_model(tmp_path / "audio.onnx"))

    assert audio.task is None
    assert "string_agreement" not in audio.placeholder and "cer" not in audio.placeholder
    assert "cosine" in audio.placeholder and "no task" in audio.empty_means()


def test_the_budget_box_suggests_the_task_set_on_the_card(tiny_model: Path) -> None:
    detector = optimize_services.task_hint(tiny_model, "detection_boxes")

    assert detector.placeholder == "f1=0.95"
    assert detector.empty_means().endswith("default, f1=0.95")
