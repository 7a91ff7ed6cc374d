"""`optimize --task/--budget`: variants judged in the task's terms, bad budgets named."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from test_cli import optimize_args, optistudio

quick = partial(optimize_args, recipe="fp16", seconds="0.1")
"""The optimize command line of these tests: `quick(MODEL, FLAGS..., out=...)`."""
CLASSIFICATION = ("--task", "classification")


def test_a_budget_in_task_metrics_is_stored_with_every_variant(
    tiny_model: Path, tmp_path: Path
) -> None:
    done = optistudio(*quick(tiny_model, *CLASSIFICATION, "--budget", "top1_disagreement=0.05",
                             out=tmp_path / "v", as_json=True), data_dir=tmp_path)  # fmt: skip

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["task"] == "classification" and "set by the user" in report["task_reason"]
    assert report["task_budget"] == {"top1_disagreement": 0.05}
    variant = report["variants"][0]
    assert variant["accuracy"]["task"] == "classification"
    assert "top1_agreement" in variant["accuracy"]["task_metrics"]
    assert "top1_disagreement" in variant["budget_note"]


def test_a_budget_the_task_cannot_measure_is_refused_naming_what_to_do(
    tiny_model: Path, tmp_path: Path
) -> None:
    budget = partial(quick, tiny_model, *CLASSIFICATION, "--budget", out=tmp_path / "v")
    unknown = optistudio(*budget("bleu=0.9"), data_dir=tmp_path)
    unlabelled = optistudio(*budget("top1_drop=0.01"), data_dir=tmp_path)
    malformed = optistudio(*budget("top1_drop"), data_dir=tmp_path)

    assert unknown.returncode == 2 and "no metric 'bleu'. Its metrics: top1_agreement" in (
        unknown.stderr
    )
    assert unlabelled.returncode == 2 and "can only be measured against labels" in (
        unlabelled.stderr
    )
    assert malformed.returncode == 2 and "expected METRIC=LIMIT" in malformed.stderr
    assert "Traceback" not in unknown.stderr + unlabelled.stderr + malformed.stderr


def test_task_none_judges_by_cosine(tiny_model: Path, tmp_path: Path) -> None:
    done = optistudio(*quick(tiny_model, "--task", "none", out=tmp_path / "v", as_json=True),
                      data_dir=tmp_path)  # fmt: skip

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["task"] is None and "mean cosine" in report["variants"][0]["budget_note"]


def test_a_variant_that_passes_cosine_but_fails_the_task_is_not_chosen(tmp_path: Path) -> None:
    """INT8 makes the near-tie classifier's two leading columns equal: its scores keep a
    cosine above 0.99 while a fifth of the top-1 answers flip."""
    from optimize_models import near_tie_classifier

    model = near_tie_classifier(tmp_path / "near_tie.onnx")
    done = optistudio(*optimize_args(model, recipe="int8_dynamic", seconds="0.1",
                                     out=tmp_path / "v", as_json=True), data_dir=tmp_path)  # fmt: skip

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    variant = report["variants"][0]
    assert report["task"] == "classification"  # recognized: [N, 6] after Softmax
    assert report["task_confidence"] == "high"  # a softmax on the class axis, named probs
    assert report["task_reasons"][0].startswith("+3 graph: probs [N, 6] after Softmax")
    assert variant["accuracy"]["mean_cosine"] > 0.99  # what the cosine budget would accept
    assert variant["accuracy"]["task_metrics"]["top1_disagreement"] > 0.01
    assert not variant["within_budget"] and report["chosen"] is None
    assert variant["accuracy"]["worst"], "the drill-down lists the flipped samples"
