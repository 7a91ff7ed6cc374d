"""Audio inputs recognized by their shape (not only their name), fed built-in speech-like audio
at the rate the model states or the length implies, as samples or as the frames the input
declares (log-mel, STFT magnitude); inputs that only look alike keep their own set or none."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.data.builtin.audio_inputs import (
    audio_input,
    implied_rate,
    rate_input,
    stated_rate,
)
from optistudio.core.data.builtin.audio_samples import WHAT, audio_sample
from optistudio.core.data.builtin.dataset import BuiltinDataset, plan
from optistudio.core.data.builtin.spectra import (
    log_mel,
    mel_filterbank,
    stft_geometry,
    stft_magnitude,
)
from optistudio.core.data.datasets import SyntheticDataset
from optistudio.core.model.info import TensorSpec


def spec(name: str, *shape: int | str, dtype: str = "float32") -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, shape=list(shape))


def fed(specs: list[TensorSpec], **given: object) -> BuiltinDataset:
    base = SyntheticDataset(specs, samples=2, **given)  # type: ignore[arg-type]
    found = plan(base, None, None)
    assert not found.missing, found.missing
    return BuiltinDataset(base, found.sets)


@pytest.mark.parametrize(
    ("tensor", "shape", "form", "rate"),
    [
        pytest.param(spec("input_1", "N", 144160), (1, 144160), "waveform", 16000, id="dnsmos-NL"),
        pytest.param(spec("in:0", "N", 43844, 1), (1, 43844, 1), "waveform", 22050, id="NL1-22k"),
        pytest.param(spec("x", "N", 1, 16000), (1, 1, 16000), "waveform", 16000, id="N1L"),
        pytest.param(spec("x", "N", 28000), (1, 28000), "waveform", 8000, id="telephony-8k"),
        pytest.param(spec("audio", "N", "T"), (1, 512), "waveform", 16000, id="named-short"),
        pytest.param(spec("x", "N", 80, "T"), (1, 80, 300), "log-mel", 16000, id="mel-N80T"),
        pytest.param(spec("x", "N", 128, "T"), (1, 128, 50), "log-mel", 16000, id="mel-N128T"),
        pytest.param(
            spec("input_features", "N", 80, 3000), (1, 80, 3000), "log-mel", 16000, id="whisper"
        ),
        pytest.param(spec("fbank", "N", "T", 64), (1, 40, 64), "log-mel", 16000, id="named-fbank"),
        pytest.param(spec("input_1", "N", 900, 120), (1, 900, 120), "log-mel", 16000, id="p808"),
        pytest.param(spec("x", "N", 1, "T", 257), (1, 1, 20, 257), "stft", 16000, id="N1T257"),
        pytest.param(spec("x", "N", "T", 161), (1, 20, 161), "stft", 16000, id="NT161"),
    ],
)
def test_audio_is_recognized_by_its_shape_at_a_stated_rate(tensor, shape, form, rate) -> None:
    found = audio_input(tensor, shape)

    assert found is not None and (found.form, found.rate) == (form, rate)
    assert found.rate_why


@pytest.mark.parametrize(
    ("tensor", "shape"),
    [
        pytest.param(spec("x", "N", 512), (1, 512), id="feature-vector"),
        pytest.param(spec("cls_in", "N", 80, 8400), (1, 80, 8400), id="fixed-80-channels"),
        pytest.param(spec("x", "N", "T", 80), (1, 16, 80), id="unnamed-bins-last"),
        pytest.param(spec("x", "N", 64, 120), (1, 64, 120), id="short-fixed-bins-last"),
        pytest.param(spec("x", "N", 900, 100), (1, 900, 100), id="no-band-count-last"),
        pytest.param(spec("x", "N", "T", "C"), (1, 128, 128), id="dynamic-resolved-128"),
        pytest.param(spec("ids", "N", 16000, dtype="int64"), (1, 16000), id="integers"),
        pytest.param(spec("input1", "N", 1, 64, 192), (1, 1, 64, 192), id="grey-captcha"),
    ],
)
def test_inputs_that_only_look_alike_are_not_audio(tensor, shape) -> None:
    assert audio_input(tensor, shape) is None


def test_the_length_implies_the_rate_by_a_documented_order() -> None:
    assert implied_rate(144160)[0] == 16000  # 9.01 s, not 3.27 s at 44.1 kHz
    assert implied_rate(43844)[0] == 22050  # basic-pitch's 2 s window less a hop
    assert implied_rate(8000)[0] == 16000  # half a second at 16 kHz before 1 s at 8 kHz
    assert implied_rate(28000)[0] == 8000
    rate, why = implied_rate(12345)
    assert rate == 16000 and "no whole number of half seconds" in why


def test_the_metadata_the_name_or_a_rate_input_state_the_rate() -> None:
    model = onnx.ModelProto()
    helper.set_model_props(model, {"sample_rate": "44100"})
    sr = spec("sr", dtype="int64")

    assert stated_rate("x", model) == (44100, "the model's metadata 'sample_rate'")
    assert stated_rate("audio_22k", None) == (22050, "the input's name 'audio_22k'")
    assert stated_rate("wav_8000hz", None)[0] == 8000  # type: ignore[index]
    assert stated_rate("input_1", None) is None
    assert rate_input([sr], {"sr": 8000}) == (8000, "the value given to input 'sr'")
    assert rate_input([sr], {})[0] == 16000  # type: ignore[index]
    found = audio_input(spec("x", "N", 144160), (1, 144160), model=model)
    assert found is not None and found.rate == 44100  # stated beats implied


def test_stft_magnitude_of_a_tone_peaks_in_its_bin() -> None:
    rate, frequency = 16000, 1000.0
    tone = np.sin(2 * np.pi * frequency * np.arange(4000) / rate)
    window, hop = stft_geometry(257)

    frames = stft_magnitude(tone, window, hop)

    assert (window, hop) == (512, 128) and frames.shape == (1 + (4000 - 512) // 128, 257)
    assert np.all(np.argmax(frames, axis=1) == round(frequency * window / rate))


def test_the_mel_filters_are_triangles_that_cover_the_band_in_order() -> None:
    bank = mel_filterbank(80, 400, 16000)

    assert bank.shape == (80, 201) and bank.min() >= 0 and bank.max() <= 1
    peaks = np.argmax(bank, axis=1)
    assert np.all(np.diff(peaks) >= 0) and peaks[-1] > peaks[0]
    assert np.all(bank.sum(axis=1) > 0)  # no empty band at this resolution


def test_log_mel_of_a_low_tone_is_loudest_in_a_low_band() -> None:
    tone = np.sin(2 * np.pi * 300.0 * np.arange(16000) / 16000)

    frames = log_mel(tone, 80, 16000)

    assert frames.shape == (98, 80)  # (16000 - 400) // 160 + 1
    assert int(np.argmax(frames.mean(axis=0))) < 20


@pytest.mark.parametrize(
    ("tensor", "batch_shape", "says"),
    [
        pytest.param(spec("input_1", "N", 144160), (1, 144160), "samples at 16 kHz", id="NL"),
        pytest.param(spec("x", "N", 43844, 1), (1, 43844, 1), "samples at 22.05 kHz", id="NL1"),
        pytest.param(spec("x", "N", 80, "T"), (1, 80, 16), "log-mel frames, 80 mel", id="mel"),
        pytest.param(spec("in", "N", 900, 120), (1, 900, 120), "120 mel bands", id="mel-last"),
        pytest.param(spec("x", "N", 1, "T", 257), (1, 1, 16, 257), "STFT magnitude", id="stft"),
    ],
)
def test_each_audio_input_is_fed_speech_like_audio_in_its_form(tensor, batch_shape, says) -> None:
    data = fed([tensor])

    batch = next(iter(data.batches()))[tensor.name]

    assert batch.shape == batch_shape and batch.dtype == np.float32
    assert np.all(np.isfinite(batch)) and batch.std() > 0
    assert f"{tensor.name}: 2 clips of {WHAT}" in data.description and says in data.description


def test_frames_lie_along_the_declared_axes() -> None:
    found = audio_input(spec("x", "N", 80, "T"), (1, 80, 30))
    assert found is not None and not found.bins_last

    first = audio_sample(found, 0, (80, 30), seed=0)
    last = audio_sample(found.__class__("log-mel", 16000, "", 80, True), 0, (30, 80), seed=0)

    assert np.allclose(first, last.T)  # the same frames, bins first or last


def test_a_short_streaming_window_holds_voice_not_the_opening_pause() -> None:
    data = fed([spec("audio", "N", 512)])

    window = next(iter(data.batches()))["audio"]

    assert float(np.abs(window).max()) > 0.1


def test_a_streaming_vad_gets_audio_zero_state_and_its_rate() -> None:
    specs = [spec("input", "N", 576), spec("state", 2, "N", 128), spec("sr", dtype="int64")]

    data = fed(specs)

    batch = next(iter(data.batches()))
    assert int(batch["sr"]) == 16000 and np.all(batch["state"] == 0)
    assert np.abs(batch["input"]).max() > 0.1
    assert "state: 2 zeros" in data.description


def test_a_grey_image_stays_an_image_and_a_spectrogram_is_not_one() -> None:
    base = SyntheticDataset([spec("input1", "N", 1, 64, 192), spec("x", "N", 1, "T", 257)])

    sets = plan(base, None, None).sets

    assert sets["input1"].kind == "text lines" and sets["x"].kind == "audio"


def test_ids_that_index_an_embedding_table_are_token_ids_whatever_their_name() -> None:
    table = numpy_helper.from_array(np.zeros((3000, 4), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input"], ["y"])],
        "embed",
        [helper.make_tensor_value_info("input", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 4])],
        initializer=[table],
    )
    base = SyntheticDataset([spec("input", "batch", "seq", dtype="int64")], samples=2)

    assert plan(base, helper.make_model(graph), None).sets["input"].kind == "token ids"
    assert "'input'" in plan(base, None, None).missing  # no table, no name: no set
