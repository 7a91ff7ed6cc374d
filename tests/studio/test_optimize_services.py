"""The Optimize page's logic without Streamlit: defaults from the spec, the spec it builds from
the form and the user's files, and the variants table read from a typed result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from optistudio.core.errors import DataMismatch
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import AccuracyBudget
from optistudio.core.optimize.run import QUICK_COMPARISON
from optistudio.services.jobkinds import OPTIMIZE
from optistudio.studio import optimize_services as optimize
from optistudio.studio.errors import shown_error
from tests.studio.conftest import npz, upload


def test_the_form_starts_from_the_specs_own_defaults() -> None:
    defaults = optimize.form_defaults()

    assert defaults.min_cosine == AccuracyBudget().min_cosine
    assert defaults.max_top1_drop == AccuracyBudget().max_top1_drop
    assert defaults.seconds == QUICK_COMPARISON.min_seconds
    assert (
        optimize.budget_help()["min_cosine"]
        == AccuracyBudget.model_fields["min_cosine"].description
    )


def test_a_form_that_sets_nothing_builds_the_default_spec(app_settings, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    spec = optimize.build_spec(
        app_settings, inspect_model(tiny_model), optimize.OptimizeForm(["auto"])
    )

    assert spec == OPTIMIZE.spec()
    assert OPTIMIZE.target(spec) == ("onnxruntime", "cpu")


def test_the_form_sets_budget_timing_target_and_stores_the_data(
    app_settings, tiny_model: Path
) -> None:  # type: ignore[no-untyped-def]
    data = upload("calib.npz", npz(x=np.zeros((4, 16), np.float32)))
    form = optimize.OptimizeForm(
        ["graph"], target="openvino", min_cosine=0.995, max_top1_drop=0.02, seconds=0.5
    )

    spec = optimize.build_spec(app_settings, inspect_model(tiny_model), form, data)

    assert spec.budget == AccuracyBudget(min_cosine=0.995, max_top1_drop=0.02)
    assert (spec.comparison.min_seconds, spec.comparison.max_seconds) == (0.5, 5.0)
    assert spec.data_path and Path(spec.data_path).is_file() and spec.labels_path is None
    assert OPTIMIZE.target(spec) == ("openvino", "cpu")


def test_data_that_does_not_fit_the_model_is_refused(app_settings, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    data = upload("calib.npz", npz(wrong=np.zeros((4, 16), np.float32)))

    with pytest.raises(DataMismatch):
        optimize.build_spec(
            app_settings, inspect_model(tiny_model), optimize.OptimizeForm(["auto"]), data
        )


def test_an_output_the_model_lacks_is_named(app_settings, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    form = optimize.OptimizeForm(["auto"], accuracy_output="logits")

    with pytest.raises(DataMismatch, match="no output 'logits'. Its outputs: y"):
        optimize.build_spec(app_settings, inspect_model(tiny_model), form)


def test_labels_without_data_are_refused_by_the_spec(app_settings, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    labels = upload("labels.csv", b"1\n2\n")

    with pytest.raises(ValidationError, match="labels need a data file"):
        optimize.build_spec(
            app_settings, inspect_model(tiny_model), optimize.OptimizeForm(["auto"]), labels=labels
        )


def test_variant_rows_come_from_the_typed_result() -> None:
    recipe = {"name": "graph", "label": "Graph optimization", "steps": []}
    stored = {  # as an optimize job wrote it before results were models
        "spec": {"recipes": ["graph"]},
        "data": "synthetic",
        "variants": [
            {"recipe": recipe, "precision": "fp32", "ratio": 0.8, "ratio_low": 0.75}
            | {"ratio_high": 0.85, "verdict": "faster", "speedup": 1.25, "within_budget": True}
            | {"model_id": 5},
            {"recipe": recipe | {"name": "fp16"}, "precision": "fp16", "verdict": ""}
            | {"error": "no", "model_id": None},
        ],
        "chosen": "graph",
    }

    made, failed = optimize.variant_rows(OPTIMIZE.parse_result(stored))

    assert made["chosen"] and made["model id"] == 5 and made["verdict"] == "faster"
    assert made["speedup CI"] == "1.18–1.33x"
    assert not failed["chosen"] and failed["verdict"] == "" and failed["error"] == "no"
    assert (made["outcome"], failed["outcome"]) == ("made", "failed")


def test_a_result_stored_before_headlines_gets_one_from_its_variants() -> None:
    recipe = {"name": "graph", "label": "Graph optimization", "steps": []}
    timed = {"precision": "fp32", "ratio_low": 0.75, "within_budget": True}
    stored = {  # as an optimize job wrote it before headlines
        "spec": {"recipes": ["auto"]},
        "data": "synthetic",
        "variants": [
            {"recipe": recipe, "ratio": 0.8, "ratio_high": 0.85, "verdict": "faster"}
            | timed
            | {"speedup": 1.25},
            {"recipe": recipe | {"name": "int8_nncf", "label": "INT8 NNCF"}, "ratio": 0.5}
            | timed
            | {"ratio_high": 0.55, "verdict": "faster", "speedup": 2.0}
            | {"calibrated_on_random": True},
        ],
        "chosen": "graph",
    }

    said = OPTIMIZE.parse_result(stored).said()

    assert said.startswith("Chosen: Graph optimization, 1.25x faster")
    assert said.endswith(
        "INT8 NNCF 2.00x left out: calibrated on random inputs; give data to confirm."
    )


@pytest.mark.parametrize(
    ("task", "line", "reasons"),
    [
        (
            {"task": "classification", "task_reason": "probs [N, 10] after Softmax"}
            | {"task_confidence": "high", "task_reasons": ["+3 graph: probs", "+1 inputs: x"]}
            | {"task_budget": {"top1_disagreement": 0.01}},
            "Judged as classification (high confidence): probs [N, 10] after Softmax. "
            "Budget: top1_disagreement=0.01.",
            ["+3 graph: probs", "+1 inputs: x"],
        ),
        (
            {"task_reason": "no task recognized: the evidence for each task is too weak"}
            | {"task_reasons": ["no task recognized: ...", "not ctc_text: -2 metadata: ..."]},
            "Judged by output cosine and top-1 (no task recognized: the evidence for each task "
            "is too weak).",
            ["not ctc_text: -2 metadata: ..."],
        ),
        (
            {"task": "ctc_text", "task_reason": "probs [N, T, 37]", "task_budget": {"cer": 0.01}},
            "Judged as ctc_text: probs [N, T, 37]. Budget: cer=0.01.",
            [],
        ),
    ],
    ids=["recognized", "none-recognized", "stored-before-confidence"],
)
def test_the_task_line_states_recognitions_confidence_and_its_reasons(
    task: dict, line: str, reasons: list[str]
) -> None:
    stored = {"spec": {"recipes": ["graph"]}, "data": "synthetic", "variants": [], "chosen": None}

    result = OPTIMIZE.parse_result(stored | task)

    assert optimize.task_line(result) == line
    assert optimize.task_reasons(result) == reasons


def test_each_failed_variant_keeps_its_whole_error_to_show() -> None:
    recipe = {"name": "int8_nncf", "label": "INT8 NNCF", "steps": []}
    error = {
        "code": "model_load_failed",
        "message": "OpenVINO could not load it.",
        "hint": "Use ORT.",
    }
    result = OPTIMIZE.parse_result(
        {
            "spec": {"recipes": ["fp32", "int8_nncf"]},
            "data": "synthetic",
            "variants": [
                {"recipe": recipe | {"name": "fp32", "label": "FP32"}, "precision": "fp32"},
                {"recipe": recipe, "precision": "int8", "status": "failed", "error": error},
            ],
            "chosen": None,
        }
    )

    [(label, failure)] = optimize.variant_failures(result)
    shown = shown_error(failure, prefix=f"{label} failed: ")

    assert shown.message == "INT8 NNCF failed: OpenVINO could not load it."
    assert (shown.what_to_try, shown.code, shown.tone) == ("Use ORT.", "model_load_failed", "error")
    assert [row["outcome"] for row in optimize.variant_rows(result)] == ["made", "failed"]


def test_the_run_says_what_inputs_its_variants_were_timed_on() -> None:
    from optistudio.studio.optimize_services import fed_inputs

    fed = {"shapes": {}, "dims": {"x.3": 128}, "values": {"sr": 16000.0}, "inputs_file": None}

    assert fed_inputs(fed) == "dims x.3=128; values sr=16000.0"
    assert fed_inputs({"inputs_file": "a.npz"}) == "arrays from the user's file"
    assert fed_inputs({}) == ""


def test_the_task_picker_and_budget_box_read_as_the_spec_fields() -> None:
    from optistudio.core.errors import DataMismatch
    from optistudio.studio.optimize_services import parse_budgets, task_choices, task_table

    choices = task_choices()

    assert list(choices)[0] == "" and "ctc_text" in choices and list(choices)[-1] == "none"
    assert parse_budgets("string_agreement=0.99, cer=0.01;") == {
        "string_agreement": 0.99,
        "cer": 0.01,
    }
    assert parse_budgets("") == {}
    with pytest.raises(DataMismatch, match="METRIC=LIMIT"):
        parse_budgets("string_agreement")
    defaults = [r for r in task_table() if r["default limit"]]
    assert {r["metric"] for r in defaults} >= {"string_agreement", "box_f1", "top1_disagreement"}


def test_rows_and_the_warning_say_what_each_variant_was_calibrated_and_judged_on() -> None:
    recipe = {"name": "int8_nncf", "label": "INT8 NNCF", "steps": []}
    timed = {"precision": "int8", "ratio": 0.5, "ratio_low": 0.45, "ratio_high": 0.55}
    stored = {
        "spec": {"recipes": ["auto"]},
        "data": "built-in samples: x: 32 crops",
        "variants": [
            {"recipe": recipe} | timed | {"builtin_samples": "calibrated and judged"},
            {"recipe": recipe | {"name": "graph"}} | timed | {"builtin_samples": "judged"},
        ],
        "chosen": None,
    }
    result = OPTIMIZE.parse_result(stored)

    rows = optimize.variant_rows(result)

    assert [row["samples"] for row in rows] == [
        "calibrated and judged on built-in samples, not your data",
        "judged on built-in samples, not your data",
    ]
    assert "Calibration / accuracy data" in optimize.not_your_data(result)
    own = result.model_copy(
        update={
            "variants": [v.model_copy(update={"builtin_samples": None}) for v in result.variants]
        }
    )
    assert optimize.not_your_data(own) == ""
    # no accuracy report says where it was judged: 'your data' only for a report on the user's
    # samples (tests/studio/test_provenance_labels.py)
    assert {row["samples"] for row in optimize.variant_rows(own)} == {"not judged"}


def test_a_models_runs_are_its_own(db_factory, app_settings, make_model) -> None:  # type: ignore[no-untyped-def]
    from optistudio.db.models import JobKind, JobStatus
    from optistudio.db.queries import create_job, finish_job, set_job_result
    from optistudio.db.session import transaction
    from optistudio.services.catalog import add_model_file

    first, second = (
        add_model_file(db_factory, app_settings, make_model(f"{n}.onnx", features=f), name=n)
        for n, f in (("first", 8), ("second", 12))
    )
    stored = {"spec": {"recipes": ["graph"]}, "data": "synthetic", "variants": [], "chosen": None}
    with transaction(db_factory) as s:
        for model_id in (first.model_id, second.model_id, first.model_id):
            job = create_job(s, kind=JobKind.optimize, spec={}, model_id=model_id).id
            set_job_result(s, job_id=job, result=stored)
            finish_job(s, job_id=job, status=JobStatus.succeeded)

    mine = optimize.optimization_runs(db_factory, model_id=first.model_id)
    theirs = optimize.optimization_runs(db_factory, model_id=second.model_id, limit=1)

    assert [run.model for run in mine] == ["first", "first"]
    assert [run.id for run in mine] == [3, 1]  # newest first
    assert [run.model for run in theirs] == ["second"]
    assert len(optimize.optimization_runs(db_factory)) == 3


def test_the_form_suggests_the_budget_of_the_task_the_model_reads_as(tiny_model: Path) -> None:
    detector = optimize.task_hint(tiny_model, "detection_boxes")
    missing = optimize.task_hint(tiny_model.with_name("gone.onnx"))

    assert detector.budget_example == "f1=0.95" and not detector.reads_top1
    assert "string_agreement" not in detector.budget_example
    assert missing.task is None and missing.reads_top1  # an unreadable file: the generic form
    assert optimize.task_hint(None, "none").reads_top1


@pytest.mark.parametrize("task", [None, "text_generation"], ids=["recognized", "set"])
def test_a_decoders_form_suggests_the_perplexity_budget_its_run_uses(  # type: ignore[no-untyped-def]
    tmp_path: Path, tiny_model: Path, task
) -> None:
    from decoder_models import build_tiny_decoder

    decoder = optimize.task_hint(build_tiny_decoder(tmp_path / "decoder"), task)
    logits = optimize.task_hint(tiny_model, "text_generation")  # no KV cache: not a decoder

    assert decoder.decoder and decoder.budget_example == "perplexity_increase=0.05"
    assert not logits.decoder and logits.budget_example == "top1_agreement=0.9"


def test_a_pass_setting_without_a_default_reads_as_a_dash() -> None:
    from optistudio.core.passes.base import passes

    tables = [optimize.pass_settings_table(info) for info in passes]

    defaults = [value for table in tables for value in table["default"]]
    assert "None" not in defaults and "PydanticUndefined" not in defaults
    assert all(isinstance(value, str) and value for value in defaults)
