"""Recognizing a model's task from its graph: tiny graphs of each kind, and real PP-OCR nets."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest
from evaluator_graphs import (
    classifier_model,
    ctc_logits_model,
    ctc_model,
    named_embedding_model,
    pooled_embedding_model,
    probability_map_model,
    regressor_model,
    rows_boxes_model,
    save,
    segmentation_model,
    split_boxes_model,
    tensor,
    unknown_model,
)
from onnx import helper

from optistudio.core.errors import InvalidSpec, UnknownName
from optistudio.core.numerics.evaluators.base import evaluators
from optistudio.core.numerics.evaluators.recognize import model_facts, recognize_task

PRIORITY = [
    "detection_map",
    "text_generation",
    "detection_boxes",
    "ctc_text",
    "segmentation",
    "classification",
    "multilabel",
    "embedding",
    "binary",
    "regression",
]


@pytest.mark.parametrize(
    ("build", "task", "outputs", "reason_has"),
    [
        (ctc_model, "ctc_text", ["probs"], "probs [N, T, 37] after Softmax on the last axis"),
        (probability_map_model, "detection_map", ["map"], "map [N, 1, H, W] after Sigmoid"),
        (split_boxes_model, "detection_boxes", ["boxes", "scores", "labels"], "boxes [N, K, 4]"),
        (rows_boxes_model, "detection_boxes", ["output0"], "output0 [N, 300, 6] read as rows"),
        (segmentation_model, "segmentation", ["out"], "out [N, 21, 64, 64] after Conv"),
        (classifier_model, "classification", ["logits"], "logits [N, 10] after MatMul + bias"),
        (pooled_embedding_model, "embedding", ["pooled"], "pooled [N, 16] made by ReduceMean"),
        (named_embedding_model, "embedding", ["sentence_embedding"], "[N, 32] named as an"),
        (regressor_model, "regression", ["variable"], "variable [N, 1] holds one float"),
    ],
    ids=[
        "ctc",
        "probability-map",
        "split-boxes",
        "rows-boxes",
        "segmentation",
        "classifier",
        "pooled-embedding",
        "named-embedding",
        "regressor",
    ],
)
def test_each_output_kind_is_recognized_with_its_shape_in_the_reason(
    tmp_path: Path, build: Callable[[Path], Path], task: str, outputs: list[str], reason_has: str
) -> None:
    found = recognize_task(model_facts(build(tmp_path / "m.onnx")))

    assert found is not None
    info, recognition = found
    assert (info.name, recognition.task, recognition.outputs) == (task, task, outputs)
    assert reason_has in recognition.reason
    assert recognition.chosen_by == "recognized"


def test_an_output_no_task_claims_is_left_to_cosine(tmp_path: Path) -> None:
    assert recognize_task(model_facts(unknown_model(tmp_path / "m.onnx"))) is None


def test_unbatched_boxes_without_classes(tmp_path: Path) -> None:
    path = split_boxes_model(tmp_path / "m.onnx", batched=False, with_classes=False)

    info, recognition = recognize_task(model_facts(path)) or (None, None)

    assert info is not None and recognition is not None
    assert recognition.outputs == ["boxes", "scores"]
    assert "boxes [K, 4] and scores [K]" in recognition.reason


def test_raw_logits_are_ctc_only_with_a_paddleocr_charset(tmp_path: Path) -> None:
    charset = [chr(ord("a") + i) for i in range(26)]
    path = ctc_logits_model(tmp_path / "m.onnx", classes=28, charset=charset)

    info, recognition = recognize_task(model_facts(path)) or (None, None)

    assert info is not None and info.name == "ctc_text"
    assert "'character' list in the metadata" in recognition.reason
    assert recognition.vocabulary == charset
    assert "vocabulary" not in recognition.model_dump()  # derived from the model, not stored


def test_a_softmax_over_six_classes_is_a_classifier_not_detection_rows(tmp_path: Path) -> None:
    path = save(
        tmp_path / "m.onnx",
        [helper.make_node("Softmax", ["x"], ["probs"], axis=-1)],
        [tensor("x", ["N", 6])],
        [tensor("probs", ["N", 6])],
    )

    info, recognition = recognize_task(model_facts(path)) or (None, None)

    assert info is not None and info.name == "classification"
    assert "probs [N, 6] after Softmax on the last axis" in recognition.reason


def test_softmax_axis_defaults_to_the_opset_rule(tmp_path: Path) -> None:
    """Softmax without an axis means -1 from opset 13 and 1 before: [N, T, C] at opset 11 is
    then a softmax over T, not a CTC recognizer's."""
    nodes = [helper.make_node("Softmax", ["feat"], ["probs"])]
    io = ([tensor("feat", ["N", "T", 40])], [tensor("probs", ["N", "T", 40])])
    new = model_facts(save(tmp_path / "new.onnx", nodes, *io, opset=13))
    old = model_facts(save(tmp_path / "old.onnx", nodes, *io, opset=11))

    assert new.outputs[0].producer_axis == -1
    assert old.outputs[0].producer_axis == 1
    assert recognize_task(new)[0].name == "ctc_text"  # type: ignore[index]
    assert recognize_task(old) is None


def test_producers_are_read_past_pass_through_ops(tmp_path: Path) -> None:
    path = save(
        tmp_path / "m.onnx",
        [
            helper.make_node("MatMul", ["x", "W"], ["h"]),
            helper.make_node("Softmax", ["h"], ["p"], axis=-1),
            helper.make_node("Unsqueeze", ["p", "axes"], ["u"]),
            helper.make_node("Transpose", ["u"], ["t"], perm=[0, 1, 2]),
            helper.make_node("Cast", ["t"], ["y"], to=1),
        ],
        [tensor("x", ["N", 4])],
        [tensor("y", ["N", 1, 3])],
        initializers=[
            helper.make_tensor("W", 1, [4, 3], [0.1] * 12),
            helper.make_tensor("axes", 7, [1], [1]),
        ],
    )

    output = model_facts(path).outputs[0]

    assert (output.producer, output.producer_axis, output.feeds) == ("Softmax", -1, ["MatMul"])
    assert output.shape == ["N", 1, 3]


def test_facts_read_inputs_and_metadata(tmp_path: Path) -> None:
    path = ctc_model(tmp_path / "m.onnx", metadata={"character": "a\nb", "author": "x"})

    facts = model_facts(path)

    assert facts.input_shapes == {"feat": ["N", "T", 37]}
    assert facts.metadata_keys == ["author", "character"]
    assert facts.metadata["character"] == "a\nb"
    assert facts.outputs[0].dtype == "float32"


def test_recognizers_run_in_priority_order() -> None:
    ordered = sorted(evaluators, key=lambda info: info.priority)

    assert [info.name for info in ordered] == PRIORITY


def test_a_task_set_by_the_user_is_used_with_its_reason(tmp_path: Path) -> None:
    facts = model_facts(classifier_model(tmp_path / "m.onnx"))

    info, recognition = recognize_task(facts, task="embedding") or (None, None)

    assert info is not None and info.name == "embedding"
    assert recognition.chosen_by == "user"
    assert recognition.outputs == ["logits"]
    assert "set by the user" in recognition.reason


def test_a_task_that_cannot_read_the_output_is_refused(tmp_path: Path) -> None:
    facts = model_facts(classifier_model(tmp_path / "m.onnx"))

    with pytest.raises(InvalidSpec, match=r"ctc_text task cannot judge output 'logits' \[N, 10\]"):
        recognize_task(facts, task="ctc_text")


def test_unknown_task_and_unknown_output_are_named(tmp_path: Path) -> None:
    facts = model_facts(classifier_model(tmp_path / "m.onnx"))

    with pytest.raises(UnknownName, match="classification"):
        recognize_task(facts, task="ocr")
    with pytest.raises(InvalidSpec, match="no output 'scores'. Its outputs: logits"):
        recognize_task(facts, outputs=["scores"])


def test_outputs_restrict_what_recognition_looks_at(tmp_path: Path) -> None:
    path = save(
        tmp_path / "m.onnx",
        [
            helper.make_node("Softmax", ["x"], ["probs"], axis=-1),
            helper.make_node("ReduceMean", ["x"], ["pooled"], axes=[1], keepdims=1),
        ],
        [tensor("x", ["N", 12])],
        [tensor("probs", ["N", 12]), tensor("pooled", ["N", 1])],
    )
    facts = model_facts(path)

    assert recognize_task(facts)[0].name == "classification"  # type: ignore[index]
    only = recognize_task(facts, outputs=["pooled"])
    assert only is not None and only[0].name == "regression"
    assert only[1].outputs == ["pooled"]


RAPIDOCR = importlib.util.find_spec("rapidocr_onnxruntime")
PPOCR = [
    ("ch_PP-OCRv4_det_infer.onnx", "detection_map", "[N, 1, H, W] after Sigmoid"),
    ("ch_PP-OCRv4_rec_infer.onnx", "ctc_text", "[N, T, 6625] after Softmax on the last axis"),
    ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "classification", "[N, 2] after Softmax"),
]


@pytest.mark.skipif(RAPIDOCR is None, reason="rapidocr-onnxruntime not installed")
@pytest.mark.parametrize(("file", "task", "reason_has"), PPOCR, ids=["det", "rec", "cls"])
def test_real_ppocr_nets_are_recognized(file: str, task: str, reason_has: str) -> None:
    assert RAPIDOCR is not None and RAPIDOCR.origin is not None
    path = Path(RAPIDOCR.origin).parent / "models" / file

    found = recognize_task(model_facts(path))

    assert found is not None
    assert found[0].name == task
    assert reason_has in found[1].reason


@pytest.mark.skipif(RAPIDOCR is None, reason="rapidocr-onnxruntime not installed")
def test_the_ppocr_recognizer_brings_its_charset() -> None:
    assert RAPIDOCR is not None and RAPIDOCR.origin is not None
    path = Path(RAPIDOCR.origin).parent / "models" / "ch_PP-OCRv4_rec_infer.onnx"

    _, recognition = recognize_task(model_facts(path)) or (None, None)

    assert recognition is not None and recognition.vocabulary is not None
    assert len(recognition.vocabulary) == 6625 - 2  # the blank before, a space after
