"""The card's "make the batch dynamic": one optimize job with the dynamic_batch recipe, whose
variant is a stored model with a free batch and its original's input profile."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.model.info import ModelInfo
from optistudio.services.catalog import add_model_file
from optistudio.services.input_profiles import load_profile
from optistudio.studio.model_batch import make_dynamic
from tests.studio.conftest import one_click_variant, studio_page


def fixed_linear(path: Path) -> Path:
    """y = x @ W with x declared [1, 16]: a batch fixed at 1 only in the declarations."""
    weight = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "fixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        initializer=[numpy_helper.from_array(weight, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_the_button_sends_one_rewrite_whose_variant_has_a_free_batch(  # type: ignore[no-untyped-def]
    db_factory, app_settings, tmp_path
) -> None:
    model_id = add_model_file(
        db_factory, app_settings, fixed_linear(tmp_path / "fixed.onnx"), name="fixed"
    ).model_id

    variant = one_click_variant(db_factory, make_dynamic, model_id)

    freed = ModelInfo.model_validate(variant.info)
    assert not isinstance(freed.inputs[0].shape[0], int)  # the batch is free
    assert load_profile(db_factory, variant.id) == load_profile(db_factory, model_id)


def offer(model_id: int) -> None:
    from optistudio.studio.model_batch import dynamic_batch_offer

    dynamic_batch_offer(model_id)


def test_the_offer_without_a_live_worker_says_what_to_start(db_factory, app_settings) -> None:  # type: ignore[no-untyped-def]
    at = studio_page(offer, model_id=1)
    at.run()
    assert not at.exception and "Batch fixed at 1 by the model" in at.caption[0].value
    next(b for b in at.button if b.label == "Make the batch dynamic").click().run()

    assert not at.exception and at.error and "worker" in at.error[0].value.lower()
