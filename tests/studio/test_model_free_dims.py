"""The card's "Free the declared dims": one optimize job with the free_dims recipe, whose
variant is a stored model with the dims free and its original's input profile."""

from __future__ import annotations

from optistudio.core.model.info import ModelInfo
from optistudio.services.catalog import add_model_file
from optistudio.services.input_profiles import load_profile
from optistudio.studio.model_free_dims import declared_sizes, make_free
from tests.core.passes.free_dims_models import fully_convolutional
from tests.studio.conftest import one_click_variant


def test_the_button_stores_a_variant_with_the_dims_free(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path
) -> None:
    path = fully_convolutional(tmp_path / "fcn.onnx", batch=1)  # the optimize run feeds batch 1
    model_id = add_model_file(db_factory, app_settings, path, name="fcn").model_id

    variant = one_click_variant(db_factory, make_free, model_id)

    freed = ModelInfo.model_validate(variant.info)
    assert freed.inputs[0].shape == ["batch", 3, "height", "width"]
    assert load_profile(db_factory, variant.id) == load_profile(db_factory, model_id)


def test_the_offer_names_what_the_file_declares() -> None:
    info = {"name": "x", "dtype": "float32"}
    fixed = ModelInfo.model_construct(inputs=[_spec(info, [10, 3, 32, 32])])
    channels_only = ModelInfo.model_construct(inputs=[_spec(info, ["n", 3, "h", "w"])])

    assert declared_sizes(fixed) == "x 10x3x32x32"
    assert declared_sizes(channels_only) is None


def _spec(info: dict, shape: list) -> object:
    from optistudio.core.model.info import TensorSpec

    return TensorSpec(**info, shape=shape)
