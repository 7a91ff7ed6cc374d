"""Training data for quantization-aware training from the Optimize page: stored like the
calibration data, checked against the model, and recorded in the qat pass's settings of the job
spec (the worker reads its own copy); the evaluation data stays apart."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from diagnostic_models import build_cnn
from PIL import Image

from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.errors import DataMismatch
from optistudio.core.model.intake import inspect_model
from optistudio.core.passes.qat import QatConfig
from optistudio.services.jobkinds import OPTIMIZE
from optistudio.studio import optimize_services as optimize
from tests.studio.conftest import npz, upload


def npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def images_zip(count: int) -> bytes:
    buffer = io.BytesIO()
    rng = np.random.default_rng(0)
    with zipfile.ZipFile(buffer, "w") as zipped:
        for index in range(count):
            png = io.BytesIO()
            pixels = rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(png, format="PNG")
            zipped.writestr(f"train/img{index:02d}.png", png.getvalue())
    return buffer.getvalue()


TRAIN = npz(x=np.arange(6 * 16, dtype=np.float32).reshape(6, 16))


def test_the_epochs_start_from_the_qat_passs_own_default() -> None:
    assert optimize.form_defaults().epochs == QatConfig().epochs


def test_uploaded_training_data_reaches_the_qat_settings_of_the_job_spec(
    app_settings, tiny_model: Path
) -> None:  # type: ignore[no-untyped-def]
    calib = upload("eval.npz", npz(x=np.ones((4, 16), np.float32)))
    train, train_labels = upload("train.npz", TRAIN), upload("y.npy", npy(np.arange(6) % 2))
    form = optimize.OptimizeForm(
        ["qat"], epochs=3, pass_settings={"int8_static": {"per_channel": False}}
    )

    spec = optimize.build_spec(
        app_settings,
        inspect_model(tiny_model),
        form,
        calib,
        train=train,
        train_labels=train_labels,
    )

    qat = spec.pass_settings["qat"]
    assert set(qat) == {"train_path", "train_labels_path", "epochs"} and qat["epochs"] == 3
    assert Path(qat["train_path"]).read_bytes() == TRAIN
    assert np.load(qat["train_labels_path"]).tolist() == [0, 1, 0, 1, 0, 1]
    assert Path(qat["train_path"]).parent == app_settings.artifact_dir / "datasets"
    assert spec.data_path and spec.data_path != qat["train_path"]  # evaluation kept apart
    assert spec.pass_settings["int8_static"] == {"per_channel": False}
    assert OPTIMIZE.parse_spec(spec.model_dump(mode="json")) == spec  # as the job row keeps it


def test_without_training_data_the_spec_has_no_qat_settings(app_settings, tiny_model: Path) -> None:  # type: ignore[no-untyped-def]
    form = optimize.OptimizeForm(["auto"], epochs=3)

    spec = optimize.build_spec(app_settings, inspect_model(tiny_model), form)

    assert "qat" not in spec.pass_settings


def test_a_zip_of_training_images_carries_the_image_preprocessing(
    app_settings, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    info = inspect_model(build_cnn(tmp_path / "cnn.onnx"))
    preprocessing = ImagePreprocessing(layout="NCHW", color="BGR", mean=(0.5,) * 3)
    form = optimize.OptimizeForm(["auto"], image_preprocessing=preprocessing)

    spec = optimize.build_spec(
        app_settings,
        info,
        form,
        train=upload("train.zip", images_zip(3)),
        train_labels=upload("y.csv", b"0\n1\n1\n"),
    )

    qat = QatConfig.model_validate(spec.pass_settings["qat"])
    assert qat.image_preprocessing == preprocessing
    assert qat.train_path and qat.train_path.endswith(".zip")
    assert qat.epochs == QatConfig().epochs  # the form left it unset
    assert spec.image_preprocessing is None  # no evaluation images were given


@pytest.mark.parametrize(
    ("train", "labels", "expected"),
    [
        (
            upload("train.npz", npz(wrong=np.zeros((6, 16), np.float32))),
            None,
            r"^Training data for QAT: The data has no array for input\(s\) \['x'\]",
        ),
        (
            upload("train.npz", TRAIN),
            upload("y.npy", npy(np.arange(5))),
            "^Training data for QAT: labels have 5 entries",
        ),
        (None, upload("y.npy", npy(np.arange(6))), "Training labels need the training inputs"),
    ],
    ids=["inputs-do-not-fit", "one-label-short", "labels-without-inputs"],
)
def test_training_data_that_does_not_fit_is_refused_in_one_sentence(
    app_settings, tiny_model: Path, train, labels, expected
) -> None:  # type: ignore[no-untyped-def]
    form = optimize.OptimizeForm(["auto"])

    with pytest.raises(DataMismatch, match=expected):
        optimize.build_spec(
            app_settings, inspect_model(tiny_model), form, train=train, train_labels=labels
        )


def test_the_qat_recipe_without_training_data_says_where_to_give_it(
    app_settings, tiny_model: Path
) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DataMismatch, match="upload an .npz or a .zip of images under"):
        optimize.build_spec(
            app_settings, inspect_model(tiny_model), optimize.OptimizeForm(["fp32", "qat"])
        )


def test_the_page_offers_training_data_labels_and_epochs_for_qat(
    db_factory, app_settings, tiny_model: Path
) -> None:  # type: ignore[no-untyped-def]
    from optistudio.services.catalog import add_model_file
    from tests.studio.conftest import view_page

    add_model_file(db_factory, app_settings, tiny_model, name="tiny")
    at = view_page("optistudio.studio.views.optimize", timeout=30)

    at.run()

    assert not at.exception
    uploaders = {element.proto.label: element.proto.type for element in at.get("file_uploader")}
    assert uploaders["Training data for QAT (.npz or .zip of images)"] == [".npz", ".zip"]
    assert uploaders["Training labels (optional)"] == [".npy", ".csv"]
    [epochs] = [field for field in at.number_input if field.label == "QAT epochs"]
    assert epochs.value == QatConfig().epochs
    captions = " ".join(caption.value for caption in at.caption)
    assert "pip install 'optistudio[qat]'" in captions
    assert "only when every post-training INT8 variant misses" in captions
