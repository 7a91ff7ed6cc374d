"""Models of any size from the workers' shared storage (issue 42, item 5): the studio adds a
model already under a folder the operator configured (OPTISTUDIO_MODEL_ROOTS) without an
upload, checked and copied as an upload is, with no upload limit; any path outside the roots
(a missing one, an existing one, one reached through a link) gets the same one sentence, and
a file a model brings that leads out of its folder is refused."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
from large_decoder import MiB, folder_bytes, large_decoder

from optistudio.core.errors import ModelRejected
from optistudio.services.catalog import add_from_storage, add_upload
from optistudio.services.model_roots import OUTSIDE_ROOTS, models_under_roots
from optistudio.services.settings import Settings


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "shared").mkdir()
    return tmp_path / "shared"


@pytest.fixture
def settings(app_settings: Settings, root: Path) -> Settings:
    """The model roots on, the upload limit lowered to 1 MB."""
    return app_settings.model_copy(update={"model_roots": str(root), "max_upload_mb": 1})


def _zipped(folder: Path) -> io.BytesIO:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for file in folder.iterdir():
            archive.write(file, f"{folder.name}/{file.name}")
    buffer.seek(0)
    return buffer


def _stored(settings: Settings) -> list[Path]:
    return sorted(p for p in settings.artifact_dir.rglob("*") if p.is_file())


def test_a_decoder_over_the_upload_limit_is_added_from_storage_while_its_upload_is_refused(
    db_factory: object, settings: Settings, root: Path
) -> None:
    folder = large_decoder(root / "big-decoder").parent
    assert folder_bytes(folder) > settings.max_upload_bytes

    with pytest.raises(ModelRejected, match="larger than the upload limit of 1 MiB"):
        add_upload(db_factory, settings, _zipped(folder), filename="big-decoder.zip")  # type: ignore[arg-type]
    entry = add_from_storage(db_factory, settings, str(folder))  # type: ignore[arg-type]

    assert entry.created and entry.name == "big-decoder"
    assert entry.info.size_bytes > MiB and entry.info.external_data
    names = {path.name for path in entry.path.parent.iterdir()}
    assert {"model.onnx", "genai_config.json"} <= names  # copied: what is stored was checked
    assert not entry.path.is_relative_to(root)


def test_a_relative_path_is_read_under_the_roots(
    db_factory: object, settings: Settings, root: Path, tiny_model: Path
) -> None:
    (root / "team").mkdir()
    (root / "team" / "m.onnx").write_bytes(tiny_model.read_bytes())

    entry = add_from_storage(db_factory, settings, "team/m.onnx")  # type: ignore[arg-type]

    assert entry.created and entry.name == "m"


@pytest.mark.parametrize(
    "where", ["existing", "missing", "dotdot", "relative-dotdot", "link", "linked-folder"]
)
def test_any_path_outside_the_roots_gets_the_same_sentence(
    db_factory: object, settings: Settings, root: Path, tmp_path: Path, tiny_model: Path, where: str
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "m.onnx").write_bytes(tiny_model.read_bytes())
    (root / "to-file.onnx").symlink_to(outside / "m.onnx")
    (root / "to-folder").symlink_to(outside, target_is_directory=True)
    given = {
        "existing": str(outside / "m.onnx"),
        "missing": str(outside / "nothing.onnx"),
        "dotdot": f"{root}/../outside/m.onnx",
        "relative-dotdot": "../outside/m.onnx",
        "link": str(root / "to-file.onnx"),
        "linked-folder": str(root / "to-folder" / "m.onnx"),
    }[where]

    with pytest.raises(ModelRejected) as refused:
        add_from_storage(db_factory, settings, given)  # type: ignore[arg-type]

    assert refused.value.message == OUTSIDE_ROOTS
    assert (
        refused.value.hint == f"Give a path under {root} (the operator's OPTISTUDIO_MODEL_ROOTS)."
    )
    assert _stored(settings) == []


def test_a_config_beside_the_graph_that_links_out_of_its_folder_is_refused(
    db_factory: object, settings: Settings, root: Path, tmp_path: Path
) -> None:
    folder = large_decoder(root / "d").parent
    (tmp_path / "secret.json").write_text('{"not": "a tokenizer"}')
    (folder / "tokenizer.json").symlink_to(tmp_path / "secret.json")

    with pytest.raises(ModelRejected, match=r"tokenizer\.json is a link to a file outside"):
        add_from_storage(db_factory, settings, str(folder))  # type: ignore[arg-type]

    assert _stored(settings) == []


def test_a_file_under_the_roots_is_checked_as_an_upload_is(
    db_factory: object, settings: Settings, root: Path
) -> None:
    (root / "notes.onnx").write_text("not a model at all\n")

    with pytest.raises(ModelRejected, match=r"This is not an ONNX model: it looks like a text"):
        add_from_storage(db_factory, settings, "notes.onnx")  # type: ignore[arg-type]


def test_with_no_roots_the_feature_is_off(db_factory: object, app_settings: Settings) -> None:
    with pytest.raises(ModelRejected, match="Adding models from shared storage is off"):
        add_from_storage(db_factory, app_settings, "/anything")  # type: ignore[arg-type]


def test_the_listing_shows_models_and_decoder_folders_and_follows_no_link_out(
    settings: Settings, root: Path, tmp_path: Path, tiny_model: Path
) -> None:
    large_decoder(root / "decoder")
    (root / "vision" / "deep").mkdir(parents=True)
    (root / "vision" / "deep" / "cnn.onnx").write_bytes(tiny_model.read_bytes())
    (root / "a.onnx").write_bytes(tiny_model.read_bytes())
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "private.onnx").write_bytes(tiny_model.read_bytes())
    (root / "linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (root / "private.onnx").symlink_to(tmp_path / "elsewhere" / "private.onnx")

    listed = models_under_roots(settings)

    assert listed == [
        str(root / "a.onnx"),
        str(root / "decoder"),
        str(root / "vision/deep/cnn.onnx"),
    ]
