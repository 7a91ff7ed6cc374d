from __future__ import annotations

import importlib.util
from pathlib import Path

import onnxruntime as ort
import pytest

from optistudio.core.data.inputs import requests_batch, synthesize_inputs
from optistudio.core.errors import UnknownName
from optistudio.core.model.intake import inspect_model
from optistudio.core.model.samples import build_sample, list_samples

HAS_RAPIDOCR = importlib.util.find_spec("rapidocr_onnxruntime") is not None
SAMPLE_NAMES = [
    "tiny_cnn",
    "tiny_mlp_tokens",
    pytest.param(
        "rapidocr_det",
        marks=pytest.mark.skipif(not HAS_RAPIDOCR, reason="rapidocr-onnxruntime not installed"),
    ),
]


def sample(name: str):
    return next(s for s in list_samples() if s.name == name)


@pytest.mark.parametrize("name", SAMPLE_NAMES)
@pytest.mark.parametrize("batch_size", [1, 3], ids=["batch-1", "batch-3"])
def test_sample_passes_intake_and_runs(tmp_path: Path, name: str, batch_size: int) -> None:
    path = build_sample(name, tmp_path)
    info = inspect_model(path)
    one_image = sample(name).input_shapes

    feeds = requests_batch(info.inputs, batch_size, shapes=one_image)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outputs = session.run(None, feeds)

    assert len(outputs) == len(info.outputs)
    for output, spec in zip(outputs, info.outputs, strict=True):
        assert output.shape[0] == batch_size
        assert len(output.shape) == len(spec.shape)
        assert all(
            size == dim
            for size, dim in zip(output.shape, spec.shape, strict=True)
            if isinstance(dim, int)
        )


@pytest.mark.parametrize(
    ("name", "output_shape"),
    [
        pytest.param("tiny_cnn", (2, 10), id="tiny_cnn"),
        pytest.param("tiny_mlp_tokens", (2, 2), id="tiny_mlp_tokens"),
    ],
)
def test_built_samples_declare_their_output_shape(
    tmp_path: Path, name: str, output_shape: tuple
) -> None:
    path = build_sample(name, tmp_path)
    info = inspect_model(path)
    feeds, _ = synthesize_inputs(info.inputs, batch_size=2)

    (output,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, feeds)

    assert output.shape == output_shape
    assert info.outputs[0].shape == ["batch", output_shape[1]]
    assert (info.opset, info.ir_version) == (17, 8)


def test_tiny_mlp_tokens_has_int_inputs_and_sequence_dim(tmp_path: Path) -> None:
    info = inspect_model(build_sample("tiny_mlp_tokens", tmp_path))

    assert [(s.name, s.dtype, s.shape) for s in info.inputs] == [
        ("input_ids", "int64", ["batch", "sequence"]),
        ("attention_mask", "int64", ["batch", "sequence"]),
    ]


@pytest.mark.parametrize("name", ["tiny_cnn", "tiny_mlp_tokens"])
def test_built_samples_are_deterministic(tmp_path: Path, name: str) -> None:
    first = build_sample(name, tmp_path / "a").read_bytes()
    second = build_sample(name, tmp_path / "b").read_bytes()

    assert first == second


def test_tiny_cnn_says_its_weights_are_random() -> None:
    assert "random" in sample("tiny_cnn").description


def test_unknown_sample_lists_valid_names(tmp_path: Path) -> None:
    with pytest.raises(UnknownName) as caught:
        build_sample("resnet", tmp_path)

    assert "'resnet'" in caught.value.message
    assert "tiny_cnn" in caught.value.message and "tiny_mlp_tokens" in caught.value.message


def test_rapidocr_listed_only_when_installed() -> None:
    assert ("rapidocr_det" in [s.name for s in list_samples()]) is HAS_RAPIDOCR
