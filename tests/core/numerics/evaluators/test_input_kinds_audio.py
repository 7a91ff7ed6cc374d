"""A model's input kind reads audio from the shape too (a long row of samples, STFT or mel
frames), before an image's one channel; shapes that only look alike keep their kind."""

from __future__ import annotations

import pytest

from optistudio.core.numerics.evaluators.base import ModelFacts, OutputFacts
from optistudio.core.numerics.evaluators.input_kinds import input_evidence, input_kind


def facts(name: str, shape: list, dtype: str = "float32") -> ModelFacts:
    probs = OutputFacts(name="probs", dtype="float32", shape=["N", 4], producer="Softmax")
    return ModelFacts(outputs=[probs], input_shapes={name: shape}, input_dtypes={name: dtype})


@pytest.mark.parametrize(
    ("name", "shape", "kind"),
    [
        pytest.param("input_1", ["N", 144160], "audio", id="waveform-NL"),
        pytest.param("in:0", ["N", 43844, 1], "audio", id="waveform-NL1"),
        pytest.param("x", ["N", 1, 16000], "audio", id="waveform-N1L"),
        pytest.param("x", ["N", 80, "T"], "audio", id="mel-frames"),
        pytest.param("x", ["N", 1, "T", 257], "audio", id="stft-frames-not-a-grey-image"),
        pytest.param("x", ["N", 1, 64, 192], "image", id="grey-image"),
        pytest.param("x", ["N", 512], "features", id="feature-vector"),
        pytest.param("cls_in", ["N", 80, 8400], "sequence", id="fixed-80-by-8400"),
        pytest.param("x", ["N", "T"], "features", id="dynamic-row"),
    ],
)
def test_the_input_kind_reads_audio_from_the_shape(name, shape, kind) -> None:
    assert input_kind(facts(name, shape)) == (kind, name)


def test_audio_by_shape_speaks_for_a_classifier_and_against_an_image_task() -> None:
    waveform = facts("input_1", ["N", 144160])

    [support] = input_evidence(waveform, ("image", "tokens", "audio"))
    [against] = input_evidence(waveform, ("image",))

    assert support.weight > 0 and "audio" in support.text
    assert against.weight < 0
