"""Recognizer layouts judged by the strings they read: scores [N, T, C] and [T, N, C], and class
ids [N, T] from an ArgMax inside the model; a variant reading one string otherwise fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from evaluator_graphs import argmax_ids_model

from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.intake import inspect_model
from optistudio.core.numerics.accuracy import TaskJudge, accuracy_report
from optistudio.core.numerics.evaluators.base import Recognition, TaskScore, evaluators
from optistudio.core.numerics.evaluators.ctc_text import CTC_TEXT, step_layout
from optistudio.core.numerics.evaluators.recognize import model_facts, recognize_task

# three samples of six steps: "3 5", "7", "2 2" (a blank between the repeated 2s)
IDS = np.array([[3, 3, 0, 5, 5, 0], [0, 7, 7, 7, 0, 0], [2, 0, 2, 0, 0, 0]], dtype=np.int64)
CLASSES = 12


def scores_of(ids: np.ndarray) -> np.ndarray:
    """[N, T, C] probabilities peaked at `ids`."""
    scores = np.full((*ids.shape, CLASSES), 0.01, np.float32)
    np.put_along_axis(scores, ids[..., None], 0.9, axis=2)
    return scores


def misread() -> np.ndarray:
    ids = IDS.copy()
    ids[1, 2] = 4  # sample 1 reads "7 4 7"
    return ids


LAYOUTS = {
    "batch-first": lambda ids: scores_of(ids),
    "time-first": lambda ids: scores_of(ids).transpose(1, 0, 2),
    "argmax-ids": lambda ids: ids,
}


def judged(layout: str, candidate_ids: np.ndarray) -> TaskScore:
    write = LAYOUTS[layout]
    tally = (
        evaluators.get("ctc_text")
        .create()
        .tally(Recognition(task="ctc_text", reason="t", outputs=["out"]))
    )
    tally.add_run({"out": write(IDS)}, {"out": write(candidate_ids)}, first_sample=0, samples=3)
    return tally.score()


def within(score: TaskScore) -> bool:
    limit = CTC_TEXT.default_budget["string_agreement"]
    return CTC_TEXT.metric("string_agreement").passes(score.metrics["string_agreement"], limit)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_identical_strings_pass(layout: str) -> None:
    score = judged(layout, IDS)

    assert score.metrics["string_agreement"] == 1.0 and within(score)
    assert score.samples == 3


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_misread_string_fails_and_is_shown(layout: str) -> None:
    score = judged(layout, misread())

    assert score.metrics["string_agreement"] == pytest.approx(2 / 3)
    assert not within(score)
    assert (score.worst[0].sample, score.worst[0].reference, score.worst[0].candidate) == (
        1,
        "7",
        "7 4 7",
    )


@pytest.mark.parametrize(
    ("shape", "samples", "time_first"),
    [
        ((40, 1, 37), 1, True),
        ((1, 40, 37), 1, False),
        ((4, 4, 37), 4, False),
        ((40, 1, 37), None, False),
        ((40, 2), 2, True),
    ],
    ids=["time-first", "batch-first", "ambiguous", "samples-unknown", "ids-time-first"],
)
def test_the_time_axis_is_read_from_the_run(
    shape: tuple[int, ...], samples: int | None, time_first: bool
) -> None:
    layout = step_layout(shape, samples)

    assert layout.time_first is time_first
    assert ("[T, N" in layout.text) is time_first


def test_an_argmax_recognizer_is_judged_end_to_end(tmp_path: Path) -> None:
    model = argmax_ids_model(tmp_path / "m.onnx")
    found = recognize_task(model_facts(model))
    assert found is not None
    info, recognition = found
    data = SyntheticDataset(inspect_model(model).inputs, samples=4, dims={"T": 20})

    report = accuracy_report(model, model, data, judge=TaskJudge(info.create(), recognition))

    assert report.task == "ctc_text" and report.task_metrics["string_agreement"] == 1.0
    assert "greedy CTC decoding (blank = class 0) of class ids [N, T]" in report.task_note
    assert report.samples == 4
