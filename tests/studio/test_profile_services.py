"""The card's input-profile table: what it shows, and what a user's edits become."""

from __future__ import annotations

import pytest

from optistudio.core.data.input_profile import propose_input_profile
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import ModelInfo, TensorSpec
from optistudio.studio.input_profile_services import profile_from_rows, profile_rows


def card(*inputs: TensorSpec) -> ModelInfo:
    return ModelInfo(
        sha256="0" * 64,
        size_bytes=1,
        ir_version=3,
        opsets={"": 11},
        op_histogram={},
        node_count=0,
        parameter_count=0,
        inputs=list(inputs),
        outputs=[],
    )


REC = card(
    TensorSpec(name="x", dtype="float32", shape=["?", 3, 48, "?"]),
    TensorSpec(name="sr", dtype="int64", shape=[]),
)


def test_the_table_shows_the_guesses_and_reads_back_as_the_same_profile():
    profile = propose_input_profile(REC.inputs)

    rows = profile_rows(profile, REC)

    x, sr = rows.to_dict("records")
    assert x["declared"] == "[?, 3, 48, ?]" and x["shape"] == "1, 3, 48, 320"
    assert x["batch axis"] == "0" and "text line 48 high" in x["how it was set"]
    assert sr["batch axis"] == "none" and sr["value"] == "16000"
    assert profile_from_rows(rows.to_dict("records"), REC, before=profile) == profile


def test_an_edited_width_is_no_longer_a_guess_and_a_cleared_value_feeds_data():
    profile = propose_input_profile(REC.inputs)
    rows = profile_rows(profile, REC).to_dict("records")
    rows[0]["shape"] = "1x3x48x640"
    rows[1]["value"] = ""

    edited = profile_from_rows(rows, REC, before=profile)

    assert edited.shapes["x"] == [1, 3, 48, 640] and edited.values == {}
    assert edited.guessed == {}


@pytest.mark.parametrize(
    ("column", "text", "words"),
    [
        ("shape", "1, 3, forty-eight, 320", "sizes separated by commas"),
        ("shape", "1, 3, 32, 320", "does not fit input 'x'"),
        ("batch axis", "first", "axis number or 'none'"),
        ("value", "lots", "must be a number"),
    ],
)
def test_a_bad_cell_names_the_input_and_what_to_type(column, text, words):
    profile = propose_input_profile(REC.inputs)
    rows = profile_rows(profile, REC).to_dict("records")
    rows[0][column] = text

    with pytest.raises(InvalidSpec, match=words):
        profile_from_rows(rows, REC, before=profile)


STATEFUL = card(
    TensorSpec(name="input", dtype="float32", shape=["batch", "time"]),
    TensorSpec(name="state", dtype="float32", shape=[2, None, 16]),
    TensorSpec(name="sr", dtype="int64", shape=[]),
)


def test_the_card_moves_a_batch_axis_and_takes_an_uploaded_array() -> None:
    import io

    import numpy as np

    from optistudio.core.data.inputs import ArrayValue
    from optistudio.studio.input_profile_services import batch_axis_choices

    profile = propose_input_profile(STATEFUL.inputs)
    rows = profile_rows(profile, STATEFUL).to_dict("records")
    assert rows[1]["batch axis"] == "1" and "batch axis 1: a state" in rows[1]["how it was set"]
    assert batch_axis_choices(STATEFUL.inputs[1]) == ["none", "0", "1", "2"]

    buffer = io.BytesIO()
    np.savez(buffer, state=np.ones((2, 1, 16), np.float32))
    rows[1]["upload"] = buffer.getvalue()
    saved = profile_from_rows(rows, STATEFUL, before=profile)
    shown = profile_rows(saved, STATEFUL).to_dict("records")
    kept = profile_from_rows(shown, STATEFUL, before=saved)  # 'array ...' keeps the array

    assert isinstance(saved.values["state"], ArrayValue)
    assert shown[1]["value"] == "array float32 [2, 1, 16]"
    assert kept.values["state"] == saved.values["state"] and kept.batch_axes["state"] == 1
    rows[1]["upload"] = b"not an npz"
    with pytest.raises(InvalidSpec, match="not a readable .npz"):
        profile_from_rows(rows, STATEFUL, before=profile)


def card_section(model_id: int) -> None:
    from optistudio.core.model.info import ModelInfo
    from optistudio.db.queries import get_model
    from optistudio.db.session import transaction
    from optistudio.services.input_profiles import load_profile
    from optistudio.studio import state
    from optistudio.studio.views.models import input_profile_section

    with transaction(state.session_factory()) as s:
        model = get_model(s, model_id=model_id)
        chosen, info = {"id": model.id}, ModelInfo.model_validate(model.info)
    input_profile_section(chosen, info, load_profile(state.session_factory(), model_id))


def test_the_card_saves_a_moved_batch_axis(db_factory, app_settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from audio_models import build_anonymous_state_model

    from optistudio.services.catalog import add_model_file
    from optistudio.services.input_profiles import load_profile
    from tests.studio.conftest import studio_page

    path = build_anonymous_state_model(tmp_path / "moved.onnx")
    model_id = add_model_file(db_factory, app_settings, path, name="moved").model_id

    at = studio_page(card_section, model_id=model_id)
    at.run()
    axis = next(box for box in at.selectbox if box.label == "Batch axis of state")
    assert not at.exception and axis.value == "1" and axis.options == ["none", "0", "1", "2"]
    axis.set_value("none")
    next(t for t in at.text_input if t.label == "Shape of state").set_value("2, 4, 16")
    next(b for b in at.button if b.label == "Save input profile").click().run()

    assert not at.exception
    saved = load_profile(db_factory, model_id)
    assert saved.batch_axes["state"] is None and saved.shapes["state"] == [2, 4, 16]


def conv_model(path, *, batch: int | str = "batch"):  # type: ignore[no-untyped-def]
    """A 3x3 'same' convolution on an image of any height and width."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    weight = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [batch, 3, "h", "w"])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
        [weight],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


def test_flops_are_counted_at_the_profiles_shapes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from optistudio.core.data.input_profile import InputProfile
    from optistudio.studio.input_profile_services import profile_flops

    path = conv_model(tmp_path / "conv.onnx")

    small = profile_flops(path, InputProfile(shapes={"x": [1, 3, 16, 16]}))
    large = profile_flops(path, InputProfile(shapes={"x": [1, 3, 32, 32]}))

    assert small is not None and large == 4 * small  # a 'same' conv's work grows with h x w
    assert profile_flops(None, InputProfile(shapes={"x": [1, 3, 16, 16]})) is None
    assert profile_flops(tmp_path / "missing.onnx", InputProfile(shapes={"x": [1]})) is None


@pytest.mark.parametrize(
    ("batch", "dynamic", "freeable", "words"),
    [
        ("batch", True, False, "the batch axis takes the batch sizes"),
        (1, False, True, "batch fixed at 1 by the model"),
        (4, False, False, "batch fixed at 4 by the model"),
    ],
    ids=["dynamic", "fixed-at-one", "fixed-at-four"],
)
def test_the_card_says_what_the_batch_field_can_do(batch, dynamic, freeable, words) -> None:  # type: ignore[no-untyped-def]
    from optistudio.studio.input_profile_services import batch_note

    info = card(TensorSpec(name="x", dtype="float32", shape=[batch, 3, 8, 8]))
    info.outputs = [TensorSpec(name="y", dtype="float32", shape=[batch, 10])]

    note = batch_note(info)

    assert (note.dynamic, note.freeable) == (dynamic, freeable)
    assert words in note.caption
    assert ("make it dynamic" in note.caption) == freeable


def test_a_long_symbolic_dim_is_a_placeholder_with_its_text_kept() -> None:
    from optistudio.core.report.symbolic_dims import MAX_SHAPE, SymbolicDims
    from optistudio.studio.input_profile_services import symbolic_legend, tensor_table

    expression = "floor((height + -1) / 32) * floor((width + -1) / 32) + 1" * 4
    dims = SymbolicDims()
    outputs = [
        TensorSpec(name="boxes", dtype="float32", shape=["batch", expression, 6]),
        TensorSpec(name="scores", dtype="float32", shape=["batch", expression]),
    ]

    shapes = list(tensor_table(outputs, dims)["shape"])
    legend = symbolic_legend(dims)

    assert shapes == ["[batch, s1, 6]", "[batch, s1]"]  # one expression, one placeholder
    assert all(len(shape) <= MAX_SHAPE for shape in shapes)
    assert legend.to_dict("records") == [{"dim": "s1", "stands for": expression}]
