"""Built-in samples: the right set per input, the model's shapes, dtypes and value ranges, the
same samples on every pass and other ones for another seed, and no set where none fits."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.builtin import scaling
from optistudio.core.data.builtin.corpus import sentences, words
from optistudio.core.data.builtin.dataset import PREFIX, BuiltinDataset, plan
from optistudio.core.data.builtin.files import byte_window, padding_for
from optistudio.core.data.builtin.tokens import vocab_size, word_id
from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.data.images import ImagePreprocessing
from optistudio.core.model.info import TensorSpec

UNIT = ImagePreprocessing(scale=1 / 255)


def dataset(
    specs: list[TensorSpec],
    *,
    model: onnx.ModelProto | None = None,
    task: str | None = None,
    scalings: dict[str, ImagePreprocessing] | None = None,
    seed: int = 0,
    samples: int = 4,
    shapes: dict[str, list[int]] | None = None,
) -> BuiltinDataset:
    base = SyntheticDataset(specs, samples=samples, batch_size=2, shapes=shapes)
    found = plan(base, model, task)
    assert not found.missing, found.missing
    chosen = {name: (pre, "as the test says") for name, pre in (scalings or {}).items()}
    return BuiltinDataset(base, found.sets, model=model, scalings=chosen, seed=seed)


def stacked(data: BuiltinDataset, name: str) -> np.ndarray:
    return np.concatenate([batch[name] for batch in data.batches()])


def embedding_model(vocab: int, name: str = "input_ids") -> onnx.ModelProto:
    table = numpy_helper.from_array(np.zeros((vocab, 4), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", name], ["y"])],
        "embed",
        [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        initializer=[table],
    )
    return helper.make_model(graph)


def image_model(first: onnx.NodeProto, constant: np.ndarray) -> onnx.ModelProto:
    graph = helper.make_graph(
        [first],
        "normalises",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 8, 8])],
        initializer=[numpy_helper.from_array(constant.astype(np.float32), "c")],
    )
    return helper.make_model(graph)


@pytest.mark.parametrize(
    ("spec", "shape", "channels_axis"),
    [
        pytest.param(
            TensorSpec(name="image", dtype="float32", shape=["batch", 3, 32, 40]),
            (4, 3, 32, 40),
            1,
            id="nchw-float",
        ),
        pytest.param(
            TensorSpec(name="image", dtype="float32", shape=["batch", 24, 24, 3]),
            (4, 24, 24, 3),
            3,
            id="nhwc-float",
        ),
    ],
)
def test_photo_crops_take_the_models_layout_size_and_range(spec, shape, channels_axis) -> None:
    data = dataset([spec], scalings={"image": UNIT})

    pixels = stacked(data, "image")

    assert pixels.shape == shape and pixels.dtype == np.float32
    assert pixels.min() >= 0.0 and pixels.max() <= 1.0
    assert pixels.std() > 0.05  # photographs, not a flat fill
    assert data.description.startswith(f"{PREFIX}: image: 4 crops of ")
    assert "scikit-learn photographs (china, flower" in data.description
    per_channel = pixels.mean(axis=tuple(a for a in range(4) if a != channels_axis))
    assert len(per_channel) == 3


def test_uint8_images_are_raw_pixels() -> None:
    spec = TensorSpec(name="image", dtype="uint8", shape=["batch", 16, 16, 3])
    norm, why = scaling.stated(onnx.ModelProto(), "image", "uint8")
    pre = scaling.preprocessing(norm, layout="NHWC", channels=3, dtype="uint8")

    pixels = stacked(dataset([spec], scalings={"image": pre}), "image")

    assert pixels.dtype == np.uint8 and pixels.shape == (4, 16, 16, 3)
    assert pixels.max() > 100 and "0..255" in why


def test_samples_are_the_same_on_every_pass_and_differ_with_the_seed() -> None:
    spec = TensorSpec(name="image", dtype="float32", shape=["batch", 3, 16, 16])
    first = dataset([spec], scalings={"image": UNIT})
    again = dataset([spec], scalings={"image": UNIT})
    other = dataset([spec], scalings={"image": UNIT}, seed=1)

    assert np.array_equal(stacked(first, "image"), stacked(first, "image"))
    assert np.array_equal(stacked(first, "image"), stacked(again, "image"))
    assert not np.array_equal(stacked(first, "image"), stacked(other, "image"))
    samples = stacked(first, "image")
    assert not np.array_equal(samples[0], samples[1])  # every sample is another crop


def test_text_lines_for_a_line_shaped_input_dark_ink_on_light_paper() -> None:
    spec = TensorSpec(name="x", dtype="float32", shape=["batch", 3, 48, "width"])
    data = dataset([spec], scalings={"x": UNIT}, shapes={"x": [2, 3, 48, 320]})

    lines = stacked(data, "x")

    assert lines.shape == (4, 3, 48, 320)
    assert "rendered text lines" in data.description
    assert np.median(lines) > 0.8  # light paper
    assert lines.min() < 0.3  # dark ink


def test_a_text_detector_gets_pages_and_a_recognizer_lines_whatever_the_size() -> None:
    spec = TensorSpec(name="x", dtype="float32", shape=["batch", 3, 64, 64])
    base = SyntheticDataset([spec], samples=2)

    assert plan(base, None, "detection_map").sets["x"].kind == "text pages"
    assert plan(base, None, "ctc_text").sets["x"].kind == "text lines"
    assert plan(base, None, "classification").sets["x"].kind == "photos"


def test_token_ids_are_hashed_words_within_the_vocabulary_with_the_mask_left_ones() -> None:
    specs = [
        TensorSpec(name="input_ids", dtype="int64", shape=["batch", 16]),
        TensorSpec(name="attention_mask", dtype="int64", shape=["batch", 16]),
        TensorSpec(name="position_ids", dtype="int64", shape=["batch", 16]),
    ]
    model = embedding_model(3000)
    data = dataset(specs, model=model)

    ids, mask = stacked(data, "input_ids"), stacked(data, "attention_mask")
    assert np.array_equal(stacked(data, "position_ids"), np.tile(np.arange(16), (4, 1)))

    assert ids.shape == (4, 16) and ids.dtype == np.int64
    assert ids.min() >= 1 and ids.max() < 3000
    assert np.all(mask == 1)
    assert len(set(ids.ravel().tolist())) > 16  # words, not one id
    assert "vocabulary of 3000" in data.description and "no tokenizer" in data.description
    assert np.array_equal(ids, stacked(dataset(specs, model=model), "input_ids"))


def test_a_large_vocabulary_keeps_clear_of_the_reserved_ids() -> None:
    assert vocab_size(embedding_model(30522), "input_ids") == 30522
    assert all(1000 <= word_id(word, 30522) < 30522 for word in words()[:200])
    assert word_id("Parser", 30522) == word_id("parser", 30522)


def test_speech_like_audio_is_loud_enough_bounded_and_deterministic() -> None:
    spec = TensorSpec(name="waveform", dtype="float32", shape=["batch", 8000])
    data = dataset([spec])

    clips = stacked(data, "waveform")

    assert clips.shape == (4, 8000) and clips.dtype == np.float32
    assert np.abs(clips).max() <= 0.51
    assert 0.01 < float(np.sqrt(np.mean(clips**2))) < 0.4
    assert "built-in speech-like audio (synthetic" in data.description
    assert np.array_equal(clips, stacked(dataset([spec]), "waveform"))


def test_byte_inputs_get_windows_of_real_files() -> None:
    spec = TensorSpec(name="bytes", dtype="int32", shape=["batch", 256])
    data = dataset([spec])

    windows = stacked(data, "bytes")

    assert windows.shape == (4, 256) and windows.dtype == np.int32
    assert windows.min() >= 0 and windows.max() <= 255
    assert len(np.unique(windows)) > 20
    assert padding_for(257) == 256 and padding_for(256) == 0 and padding_for(None) == 0
    assert byte_window(0, 10**7, pad=256)[-1] == 256  # a short file is padded


def test_an_input_without_a_set_is_named() -> None:
    specs = [
        TensorSpec(name="image", dtype="float32", shape=["batch", 3, 8, 8]),
        TensorSpec(name="scale_factor", dtype="float32", shape=["batch", 2]),
    ]

    found = plan(SyntheticDataset(specs, samples=2), None, None)

    assert found.sets == {} and "'scale_factor'" in found.missing


def test_a_value_the_user_gave_covers_its_input() -> None:
    specs = [
        TensorSpec(name="image", dtype="float32", shape=["batch", 3, 8, 8]),
        TensorSpec(name="threshold", dtype="float32", shape=[1]),
    ]
    base = SyntheticDataset(specs, samples=2, values={"threshold": 0.5})

    assert plan(base, None, None).sets["threshold"].kind == "given"


@pytest.mark.parametrize(
    ("op", "constant", "says"),
    [
        pytest.param("Div", np.array(255.0), "0..255", id="div-255"),
        pytest.param("Mul", np.array(1 / 255), "0..255", id="mul-1/255"),
        pytest.param("Sub", np.array([[[123.7]], [[116.3]], [[103.5]]]), "0..255", id="sub-pixels"),
        pytest.param("Sub", np.array([[[0.485]], [[0.456]], [[0.406]]]), "0..1", id="sub-unit"),
    ],
)
def test_a_graph_that_normalises_its_input_says_what_it_takes(op, constant, says) -> None:
    model = image_model(helper.make_node(op, ["x", "c"], ["y"]), constant)

    norm, why = scaling.stated(model, "x", "float32")

    assert why.startswith(says) and op in why
    assert norm.scale == (1.0 if says == "0..255" else 1 / 255)


def test_a_graph_that_does_not_normalise_states_nothing() -> None:
    model = image_model(helper.make_node("Conv", ["x", "c"], ["y"]), np.ones((3, 3, 1, 1)))

    assert scaling.stated(model, "x", "float32") is None


def test_metadata_mean_and_std_are_read() -> None:
    model = image_model(helper.make_node("Relu", ["x"], ["y"]), np.ones(1))
    helper.set_model_props(model, {"image_mean": "[0.5, 0.5, 0.5]", "image_std": "0.25"})

    norm, why = scaling.stated(model, "x", "float32")

    assert norm.mean == (0.5, 0.5, 0.5) and norm.std == (0.25, 0.25, 0.25)
    assert norm.scale == 1 / 255 and "metadata" in why


def test_the_pick_drops_a_saturated_candidate_and_takes_the_most_confident() -> None:
    rng = np.random.default_rng(0)
    varied = [np.eye(4)[i % 4] * 0.9 + 0.025 for i in range(6)]  # confident, and following inputs
    collapsed = [np.array([0.997, 0.001, 0.001, 0.001])] * 6  # the same for every input
    hesitant = [rng.dirichlet(np.ones(4)) for _ in range(6)]

    chosen, why = scaling.pick({"a": hesitant, "b": collapsed, "c": varied})

    assert chosen == "c" and "saturated: b" in why


def test_confidence_reads_probabilities_sigmoid_maps_and_logits_only_when_told() -> None:
    assert scaling.confidence([np.array([0.9, 0.1])]) == pytest.approx(0.9)
    assert scaling.confidence([np.array([[0.0, 1.0], [1.0, 1.0]])]) == pytest.approx(1.0)
    assert scaling.confidence([np.array([5.0, -3.0])]) is None  # an embedding, say
    assert scaling.confidence([np.array([5.0, -3.0])], logits=True) > 0.99


def test_the_corpus_is_prose() -> None:
    found = sentences()

    assert len(found) > 100
    assert all(len(sentence) <= 240 and ">>>" not in sentence for sentence in found)


def test_a_sigmoid_map_rounded_past_one_still_reads_as_probabilities() -> None:
    rounded = np.array([[0.0, 1.0000001], [1.0, 0.0]], np.float32)

    assert scaling.confidence([rounded]) == pytest.approx(1.0)
