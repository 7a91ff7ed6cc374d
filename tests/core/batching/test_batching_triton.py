"""Triton config.pbtxt export: what we write reads back with the fields Triton needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from optistudio.core.batching.triton import parse_pbtxt, triton_config
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.intake import inspect_model


def test_config_reads_back_with_batching_fields(tiny_model: Path) -> None:
    info = inspect_model(tiny_model)

    text = triton_config(
        "tiny",
        info,
        max_batch_size=16,
        preferred_batch_sizes=[8, 16],
        max_queue_delay_us=2500,
        instances=2,
    )
    config = parse_pbtxt(text)

    assert config["name"] == "tiny" and config["platform"] == "onnxruntime_onnx"
    assert config["max_batch_size"] == 16
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [16]}]
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [8]}]
    assert config["dynamic_batching"] == {
        "preferred_batch_size": [8, 16],
        "max_queue_delay_microseconds": 2500,
    }
    assert config["instance_group"] == [{"count": 2, "kind": "KIND_CPU"}]


def test_model_with_fixed_batch_is_refused_with_the_reason(make_model) -> None:
    info = inspect_model(make_model(batch=1))

    with pytest.raises(InvalidSpec, match="fixed first dimension of 1"):
        triton_config("m", info, max_batch_size=8, preferred_batch_sizes=[], max_queue_delay_us=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"preferred_batch_sizes": [32]}, "outside 1..8"),
        ({"instances": 0}, "instances"),
        ({"kind": "KIND_TPU"}, "instance kind"),
    ],
    ids=["zero-batch", "preferred-too-big", "no-instances", "bad-kind"],
)
def test_bad_settings_are_named(tiny_model: Path, kwargs: dict, message: str) -> None:
    settings = {"max_batch_size": 8, "preferred_batch_sizes": [4], "max_queue_delay_us": 100}

    with pytest.raises(InvalidSpec, match=message):
        triton_config("m", inspect_model(tiny_model), **{**settings, **kwargs})


def test_parser_handles_comments_and_inline_lists() -> None:
    text = (
        '# comment\nname: "a" dims: [ 1, -1 ]\nparameters { key: "x" value: { string_value: "1" } }'
    )

    assert parse_pbtxt(text) == {
        "name": "a",
        "dims": [1, -1],
        "parameters": [{"key": "x", "value": {"string_value": "1"}}],  # a map: repeated
    }
