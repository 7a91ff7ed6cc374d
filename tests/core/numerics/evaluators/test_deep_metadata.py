"""Metadata nested 100,000 deep is read as no label names, not a RecursionError (issue 39,
case 9: the model card said "Internal error")."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from evaluator_graphs import classifier_model

from optistudio.core.numerics.evaluators.label_metadata import MAX_NESTING, parse_names
from optistudio.core.numerics.evaluators.recognize import model_facts, recognize_task

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("key", ["names", "id2label", "labels", "class_names"])
def test_a_classifier_with_deep_metadata_is_still_recognized(tmp_path: Path, key: str) -> None:
    path = classifier_model(tmp_path / "model.onnx")
    model = onnx.load(str(path))
    model.metadata_props.append(onnx.StringStringEntryProto(key=key, value=DEEP))
    onnx.save(model, str(path))

    found = recognize_task(model_facts(path))

    assert found is not None
    info, recognition = found
    assert info.name == "classification"
    assert not any("metadata" in reason for reason in recognition.reasons)


@pytest.mark.parametrize(
    "text",
    [DEEP, "{" * 50_000 + "}" * 50_000, '{"a": ' * 5_000 + "1" + "}" * 5_000],
    ids=["lists", "braces", "objects"],
)
def test_deep_text_lists_no_names(text: str) -> None:
    assert parse_names(text) == []


def test_names_a_few_levels_deep_are_still_read() -> None:
    nested = "[" * (MAX_NESTING - 1) + '"cat", "dog"' + "]" * (MAX_NESTING - 1)
    assert parse_names('{"0": "cat", "1": "dog"}') == ["cat", "dog"]
    assert parse_names("['cat', 'dog']") == ["cat", "dog"]
    assert len(parse_names(nested)) == 1  # a list holding a list: one entry, read, not refused
