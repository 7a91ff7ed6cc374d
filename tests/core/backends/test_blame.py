"""Blame where it belongs: a file the studio made that fails to load names the pass that made
it and says it is not the user's model; only the user's own file is sent to be checked "on
your machine". The load errors are ONNX Runtime's own, from files it really refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.backends import SessionOptions, get_backend
from optistudio.core.backends.blame import made_by_studio, passes_of
from optistudio.core.errors import DataMismatch, ModelLoadError
from optistudio.core.optimize.recipes import Recipe, RecipeStep
from optistudio.core.optimize.run import set_outcome
from optistudio.core.optimize.variant import VariantResult
from optistudio.db.models import Job, JobKind, Model
from optistudio.workers.jobs import blamed
from tests.conftest import unloadable

USER_HINT = "on your machine"


def load_error(path: Path) -> ModelLoadError:
    with pytest.raises(ModelLoadError) as caught:
        get_backend("onnxruntime").load(path, SessionOptions())
    return caught.value


def test_the_users_own_file_is_sent_to_be_checked_on_their_machine(tmp_path: Path) -> None:
    error = load_error(unloadable(tmp_path / "mine.onnx"))

    assert error.message.startswith("ONNX Runtime could not load this model")
    assert error.hint and USER_HINT in error.hint


def test_a_file_the_studio_made_names_its_pass_and_blames_no_user(tmp_path: Path) -> None:
    error = load_error(unloadable(tmp_path / "variant.onnx"))

    blamed_error = made_by_studio(error, precision="int8", passes=["int8_static"])

    assert isinstance(blamed_error, ModelLoadError)
    assert blamed_error.message.startswith(
        "The INT8 file the studio made with int8_static failed to load: "
    )
    assert "bug in Optistudio's pass, not your model" in (blamed_error.hint or "")
    assert USER_HINT not in (blamed_error.hint or "")


def test_another_backends_refusal_is_left_as_it_reads(tmp_path: Path) -> None:
    error = load_error(unloadable(tmp_path / "variant.onnx"))

    # OpenVINO may refuse an operator of the original itself: not the pass's fault
    assert made_by_studio(error, precision="fp32", passes=["fp32"], backend="openvino") is error


def test_an_error_that_is_not_about_the_file_is_left_as_it_is() -> None:
    error = DataMismatch("The data has 3 samples, the labels 4.")

    assert made_by_studio(error, precision="int8", passes=["int8_static"]) is error


def test_an_optimize_variant_whose_made_file_fails_to_load_blames_the_pass(
    tmp_path: Path,
) -> None:
    recipe = Recipe(name="int8_static", label="INT8 static", steps=[RecipeStep(step="int8_static")])
    variant = VariantResult(recipe=recipe, precision="int8", backend="onnxruntime")
    variant.path = str(unloadable(tmp_path / "made.onnx"))

    set_outcome(variant, load_error(Path(variant.path)))

    assert variant.error is not None
    assert variant.error.message.startswith("The INT8 file the studio made with int8_static")
    assert USER_HINT not in (variant.error.hint or "")


def test_a_job_on_a_stored_variant_blames_the_pass_and_on_an_upload_the_user(
    tmp_path: Path,
) -> None:
    error = load_error(unloadable(tmp_path / "stored.onnx"))
    recipe = {"name": "int8_static", "label": "INT8", "steps": [{"step": "int8_static"}]}
    variant = Model(name="cnn int8", parent_id=1, recipe=recipe, precision="int8")
    upload = Model(name="cnn", parent_id=None, recipe=None, precision="fp32")

    on_variant = blamed(Job(kind=JobKind.benchmark, model=variant, spec={}), error)
    on_upload = blamed(Job(kind=JobKind.benchmark, model=upload, spec={}), error)

    assert on_variant.message.startswith("The INT8 file the studio made with int8_static")
    assert USER_HINT not in (on_variant.hint or "")
    assert on_upload is error and USER_HINT in (on_upload.hint or "")
    assert passes_of(None) == [""] and passes_of({"name": "fp16", "steps": []}) == ["fp16"]
