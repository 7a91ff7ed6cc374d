"""One optimization run prepares its model for the quantizer once: later passes get a copy of
the prepared graph (optistudio.core.passes.prepared_cache), the same graph with the same notes,
in their own folder."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest

from optistudio.core.passes import prepare
from optistudio.core.passes.prepare import prepare_for_quantizer
from optistudio.core.passes.prepared_cache import PREPARED
from tests.core.passes.exporter_graphs import already_qdq, keras2onnx_dense


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The models the pre-processing really ran on, in order."""
    ran: list[Path] = []
    real = prepare._preprocessed

    def counted(model: Path, *args: object) -> Path:
        ran.append(model)
        return real(model, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(prepare, "_preprocessed", counted)
    return ran


def test_a_model_prepared_again_is_a_copy_of_the_first_with_its_notes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _counting(monkeypatch)
    model = keras2onnx_dense(
        tmp_path / "dense.onnx", weights_as_inputs=True
    )  # IR 3: the tidying writes notes

    first = prepare_for_quantizer(model, tmp_path / "a")
    second = prepare_for_quantizer(model, tmp_path / "b")

    assert len(ran) == 1 and PREPARED.hits == 1
    assert second.path.parent == tmp_path / "b" and second.path != first.path
    assert second.path.read_bytes() == first.path.read_bytes()
    assert second.notes == first.notes and first.notes  # said again for the second pass
    second.notes.append("a pass's own note")  # a copy: the kept notes are not the pass's list
    assert prepare_for_quantizer(model, tmp_path / "c").notes == first.notes


def test_other_bytes_or_another_preparation_are_prepared_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran = _counting(monkeypatch)
    dense, qdq = (
        keras2onnx_dense(tmp_path / "dense.onnx", weights_as_inputs=True),
        already_qdq(tmp_path / "qdq.onnx")[0],
    )

    prepare_for_quantizer(dense, tmp_path / "a")
    prepare_for_quantizer(dense, tmp_path / "b", optimize=False)
    prepare_for_quantizer(dense, tmp_path / "c", keep_fusions=prepare.KEEP_FOR_DYNAMIC)
    prepare_for_quantizer(qdq, tmp_path / "d")
    proto = onnx.load(dense)
    proto.doc_string = "edited"  # the same graph, other bytes
    onnx.save(proto, tmp_path / "edited.onnx")
    prepare_for_quantizer(tmp_path / "edited.onnx", tmp_path / "e")

    assert len(ran) == 5 and PREPARED.hits == 0


def test_only_the_newest_few_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ran = _counting(monkeypatch)
    monkeypatch.setattr(PREPARED, "entries", 1)
    dense, qdq = (
        keras2onnx_dense(tmp_path / "dense.onnx", weights_as_inputs=True),
        already_qdq(tmp_path / "qdq.onnx")[0],
    )

    for index, model in enumerate((dense, qdq, dense)):
        prepare_for_quantizer(model, tmp_path / str(index))

    assert len(ran) == 3  # the dense model's was dropped when the QDQ file's was kept


def test_a_file_simplified_again_is_a_copy_with_the_same_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import onnxslim

    from optistudio.core.passes.base import PassContext, PassReport, passes
    from optistudio.core.passes.prepared_cache import SIMPLIFIED

    slims: list[str] = []
    real = onnxslim.slim

    def counted(model: str, **options: object) -> onnx.ModelProto:
        slims.append(model)
        return real(model, **options)

    monkeypatch.setattr(onnxslim, "slim", counted)
    model = keras2onnx_dense(tmp_path / "dense.onnx", weights_as_inputs=True)
    simplify = passes.get("simplify")

    def run(
        folder: str, out_name: str = "01-simplify.onnx", **config: object
    ) -> tuple[PassReport, Path]:
        (tmp_path / folder).mkdir()
        out = tmp_path / folder / out_name
        return simplify.run(model, out, config, PassContext(work_dir=tmp_path / folder)), out

    (first, first_out), (second, second_out) = run("a"), run("b", "02-simplify.onnx")
    (other, _) = run("c", skip_fusion=True)

    assert len(slims) == 2 and SIMPLIFIED.hits == 1  # the third asked for other settings
    assert (first.output, second.output) == (first_out, second_out)
    assert second_out.read_bytes() == first_out.read_bytes()
    assert second.details == first.details and second.warnings == first.warnings
    assert not (tmp_path / "b" / "01-simplify.onnx").exists()  # taken the step's own name
    assert other.output.parent == tmp_path / "c"
