"""Text in a model that is not UTF-8 (a proto2 string kept as bytes) is refused by intake in a
sentence; a dim name flipped to 'b\\x9etch' passed the checker and ONNX Runtime and then broke
the model card with a validation error (found by mutating a valid upload)."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.errors import ModelRejected
from optistudio.core.model.intake import inspect_model
from tests.conftest import build_matmul_model


@pytest.mark.parametrize(
    ("text", "flipped", "where"),
    [
        (b"batch", b"b\x9etch", "a dim name of 'x'"),
        (b"tiny", b"t\xffny", "the graph's name"),
        (b"Relu", b"R\xc3lu", "an operator type"),
    ],
    ids=["dim-name", "graph-name", "op-type"],
)
def test_text_that_is_not_utf8_is_refused_naming_where(
    tmp_path: Path, text: bytes, flipped: bytes, where: str
) -> None:
    path = build_matmul_model(tmp_path / "m.onnx")
    path.write_bytes(path.read_bytes().replace(text, flipped))

    with pytest.raises(ModelRejected) as refused:
        inspect_model(path)

    assert refused.value.message == f"The model holds text that is not valid UTF-8 ({where})."
