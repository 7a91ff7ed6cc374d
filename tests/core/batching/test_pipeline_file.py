"""pipeline.json v1: one schema (committed under docs/), written by the export bundle and the
Batching page through one writer, read back by PipelineOptimizer.from_file."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from optistudio import PipelineOptimizer
from optistudio.core.batching.pipeline_file import (
    PipelineFile,
    json_schema,
    opened_pipeline,
    parse_pipeline,
)
from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.specs import LatencyProfileSpec
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.report.bundle import BundleSource, write_bundle
from optistudio.studio import batching_export

REPO = Path(__file__).resolve().parents[3]
SCHEMA = REPO / "docs" / "pipeline.schema.json"
WAIT = 10


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=True) + "\n"


def bundle(model: Path, folder: Path, serving: dict | None = None) -> Path:
    source = BundleSource(
        name="tiny",
        model_path=model,
        info=inspect_model(model),
        coreml_precisions=[],
        serving=serving,
    )
    return write_bundle(source, folder / "bundle.zip").path


def page_file(model: Path, folder: Path, settings: BatchingSettings) -> Path:
    """The Batching page's download, saved beside the model under the name it gives."""
    served = LatencyProfileSpec(backend="onnxruntime", threads=1, shapes={"x": [1, 16]})
    serving = batching_export.verified_serving(settings, [])
    text = batching_export.pipeline_json("tiny", inspect_model(model), served, serving)
    (folder / "tiny.onnx").write_bytes(model.read_bytes())
    (folder / "pipeline.json").write_text(text)
    return folder / "pipeline.json"


def rows(count: int) -> np.ndarray:
    return np.random.default_rng(count).standard_normal((count, 16)).astype(np.float32)


def direct(model: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_the_committed_json_schema_is_the_models() -> None:
    assert SCHEMA.read_text() == schema_text(), (
        "docs/pipeline.schema.json is stale: regenerate it from PipelineFile "
        "(json.dumps(json_schema(), indent=2, sort_keys=True))"
    )


def test_the_bundle_and_the_batching_page_write_the_same_schema(
    tiny_model: Path, tmp_path: Path
) -> None:
    settings = BatchingSettings(max_batch_size=4, timeout_ms=3, instances=2)
    (tmp_path / "page").mkdir()

    with zipfile.ZipFile(bundle(tiny_model, tmp_path, settings.model_dump())) as archive:
        from_bundle = json.loads(archive.read("pipeline.json"))
    from_page = json.loads(page_file(tiny_model, tmp_path / "page", settings).read_text())

    for document in (from_bundle, from_page):
        parsed = PipelineFile.model_validate(document)  # extra="forbid": no other keys
        assert parsed.schema_version == 1
        assert parsed.batching() == settings
        assert [t.name for t in parsed.inputs] == ["x"] and [t.name for t in parsed.outputs] == [
            "y"
        ]
    assert (from_bundle["written_by"], from_page["written_by"]) == ("bundle", "batching_page")
    assert from_page["serving"]["source"] == "sliders" and from_page["threads"] == 1


@pytest.mark.parametrize("kind", ["bundle-zip", "unzipped-folder", "page-json"])
def test_from_file_serves_what_either_writer_wrote(
    tiny_model: Path, tmp_path: Path, kind: str
) -> None:
    settings = BatchingSettings(max_batch_size=4, timeout_ms=2, instances=1)
    if kind == "page-json":
        (tmp_path / "page").mkdir()
        path = page_file(tiny_model, tmp_path / "page", settings)
    else:
        path = bundle(tiny_model, tmp_path, settings.model_dump())
        if kind == "unzipped-folder":
            zipfile.ZipFile(path).extractall(tmp_path / "unzipped")
            path = tmp_path / "unzipped"
    x = rows(3)

    with PipelineOptimizer.from_file(path) as optimizer:
        outputs = optimizer.predict(x, timeout=WAIT)
        served = optimizer.settings

    assert served.max_batch_size == 4 and served.timeout_ms == 2
    np.testing.assert_allclose(outputs[0], direct(tiny_model, x), atol=1e-6)


def test_a_bundle_without_a_setting_is_served_at_the_default_it_names(
    tiny_model: Path, tmp_path: Path
) -> None:
    with PipelineOptimizer.from_file(bundle(tiny_model, tmp_path)) as optimizer:
        document = optimizer.document

    assert document is not None and document.serving is not None
    assert optimizer.settings == document.batching()
    assert document.serving.note  # where the setting came from, in words


def test_a_file_from_before_v1_is_refused_with_what_to_do(tmp_path: Path) -> None:
    old = {"model": "tiny.onnx", "backend": "onnxruntime", "shapes": {}, "instances": 1}

    with pytest.raises(InvalidSpec, match="written before pipeline.json v1") as caught:
        parse_pipeline(json.dumps(old))
    assert "Export" in (caught.value.hint or "")


def test_a_misspelt_field_is_refused_naming_it(tiny_model: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(bundle(tiny_model, tmp_path)) as archive:
        document = json.loads(archive.read("pipeline.json"))
    document["sevring"] = document.pop("serving")

    with pytest.raises(InvalidSpec, match="sevring"):
        parse_pipeline(json.dumps(document))


def test_a_model_missing_beside_the_file_is_named(tiny_model: Path, tmp_path: Path) -> None:
    path = page_file(tiny_model, tmp_path, BatchingSettings())
    (tmp_path / "tiny.onnx").unlink()

    with (
        pytest.raises(InvalidSpec, match="'tiny.onnx', is not in"),
        opened_pipeline(path) as opened,
    ):
        opened.model_path  # noqa: B018 - the access is the test


def test_a_path_outside_the_folder_is_refused(tiny_model: Path, tmp_path: Path) -> None:
    path = page_file(tiny_model, tmp_path, BatchingSettings())
    document = json.loads(path.read_text())
    path.write_text(json.dumps(document | {"model": "../elsewhere/tiny.onnx"}))

    with pytest.raises(InvalidSpec, match="outside its folder"), opened_pipeline(path) as opened:
        opened.model_path  # noqa: B018 - the access is the test


def test_a_batch_fixed_at_1_for_good_is_served_one_row_a_batch(tmp_path: Path) -> None:
    from test_fixed_batch import fixed_head  # a head whose ReduceMean mixes the batch

    model = fixed_head(tmp_path, mixing=True)
    x = np.random.default_rng(0).standard_normal((1, 3, 2, 2)).astype(np.float32)
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])

    with PipelineOptimizer.from_file(
        bundle(model, tmp_path, {"max_batch_size": 8, "timeout_ms": 2.0})
    ) as served:
        outputs = served.predict(x, timeout=WAIT)
        settings, note = served.settings, served.note

    assert settings.max_batch_size == 1 and "Served as it is" in note
    np.testing.assert_allclose(outputs[0], session.run(None, {"x": x})[0], atol=1e-6)
