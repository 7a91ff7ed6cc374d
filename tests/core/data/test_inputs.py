from __future__ import annotations

import numpy as np
import pytest

from optistudio.core.data.inputs import (
    DEFAULT_DYNAMIC_DIM,
    dims_from_overrides,
    parse_shape_overrides,
    resolve_shape,
    synthesize_inputs,
)
from optistudio.core.errors import InvalidSpec
from optistudio.core.model.info import TensorSpec


def spec(name: str, shape: list, dtype: str = "float32") -> TensorSpec:
    return TensorSpec(name=name, dtype=dtype, shape=shape)


RESOLVED = [
    pytest.param(spec("x", ["batch", 3, 8, 8]), {}, None, (4, 3, 8, 8), id="dynamic-batch"),
    pytest.param(spec("x", [4, 3]), {}, None, (4, 3), id="fixed-batch-matches"),
    pytest.param(spec("ids", ["b", "sequence"]), {"sequence": 7}, None, (4, 7), id="named-dim"),
    pytest.param(spec("ids", ["b", None]), {"ids.1": 9}, None, (4, 9), id="input-index-key"),
    pytest.param(
        spec("ids", ["b", "sequence"]),
        {"sequence": 7, "ids.1": 9},
        None,
        (4, 9),
        id="input-index-key-wins",
    ),
    pytest.param(
        spec("x", ["b", 3, "h", "w"]),
        {},
        [1, 3, 32, 64],
        (1, 3, 32, 64),
        id="override-used-exactly",
    ),
    pytest.param(spec("x", [4, 3]), {}, [4, 3], (4, 3), id="override-fixed-batch"),
    pytest.param(spec("s", []), {}, None, (), id="scalar"),
]


@pytest.mark.parametrize(("tensor", "dims", "override", "expected"), RESOLVED)
def test_resolve_shape(tensor: TensorSpec, dims: dict, override, expected: tuple) -> None:
    shape, warnings = resolve_shape(tensor, batch_size=4, dims=dims, override=override)

    assert shape == expected
    assert warnings == []


def test_unset_dynamic_dim_defaults_with_warning() -> None:
    shape, warnings = resolve_shape(spec("ids", ["batch", "sequence"]), batch_size=2, dims={})

    assert shape == (2, DEFAULT_DYNAMIC_DIM)
    assert len(warnings) == 1
    assert "'sequence'" in warnings[0] and "--shape" in warnings[0]


def test_unnamed_dynamic_dim_warning_names_input_and_index() -> None:
    _, warnings = resolve_shape(spec("pixels", ["batch", None]), batch_size=1, dims={})

    assert "dynamic dim 1 of input 'pixels'" in warnings[0]
    assert "--shape pixels=" in warnings[0]


INVALID = [
    pytest.param(spec("x", [1, 3, 8, 8]), 4, None, "fixed batch of 1", id="fixed-batch"),
    pytest.param(spec("x", [1, 3]), 4, [4, 3], "expected [1, 3]", id="override-fixed-batch"),
    pytest.param(
        spec("x", ["b", 3, 8, 8]), 1, [1, 3, 8], "expected ['?', 3, 8, 8]", id="override-rank"
    ),
    pytest.param(spec("x", ["b", 3, 8, 8]), 1, [1, 4, 8, 8], "input 'x'", id="override-fixed-dim"),
    pytest.param(spec("x", ["b", 3]), 0, None, "at least 1", id="zero-batch"),
]


@pytest.mark.parametrize(("tensor", "batch_size", "override", "expected"), INVALID)
def test_invalid_shapes_raise(tensor: TensorSpec, batch_size: int, override, expected: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        resolve_shape(tensor, batch_size=batch_size, dims={}, override=override)

    assert expected in caught.value.message


def test_override_error_shows_given_shape() -> None:
    with pytest.raises(InvalidSpec, match=r"Shape \[1, 3, 8\] does not fit input 'x'"):
        resolve_shape(spec("x", ["b", 3, 8, 8]), batch_size=1, dims={}, override=[1, 3, 8])


def test_parse_shape_overrides() -> None:
    assert parse_shape_overrides(["image=1,3,224,224", "ids=2,5"]) == {
        "image": [1, 3, 224, 224],
        "ids": [2, 5],
    }


@pytest.mark.parametrize("text", ["image", "image=", "=1,2", "image=1,x", "image=1,0"])
def test_parse_shape_overrides_rejects_bad_text(text: str) -> None:
    with pytest.raises(InvalidSpec, match="NAME=D1,D2"):
        parse_shape_overrides([text])


def test_override_for_unknown_input_lists_inputs() -> None:
    with pytest.raises(InvalidSpec, match=r"\['ids', 'mask'\]"):
        dims_from_overrides([spec("ids", ["b", "s"]), spec("mask", ["b", "s"])], {"idz": [1, 2]})


TOKEN_SPECS = [
    spec("input_ids", ["batch", "sequence"], "int64"),
    spec("attention_mask", ["batch", "sequence"], "int64"),
    spec("token_type_ids", ["batch", "sequence"], "int32"),
]


def test_token_inputs_follow_naming_conventions() -> None:
    feeds, _ = synthesize_inputs(TOKEN_SPECS, batch_size=3, dims={"sequence": 11})

    ids = feeds["input_ids"]
    assert ids.dtype == np.int64 and ids.shape == (3, 11)
    assert ids.min() >= 0 and ids.max() < 100
    assert len(np.unique(ids)) > 1
    assert (feeds["attention_mask"] == 1).all() and feeds["attention_mask"].dtype == np.int64
    assert (feeds["token_type_ids"] == 0).all() and feeds["token_type_ids"].dtype == np.int32


def test_shared_dim_warning_is_reported_once() -> None:
    _, warnings = synthesize_inputs(TOKEN_SPECS, batch_size=1)

    assert len(warnings) == 1
    assert "'sequence'" in warnings[0]


def test_override_sets_shared_dims_of_sibling_inputs() -> None:
    feeds, warnings = synthesize_inputs(TOKEN_SPECS, batch_size=2, overrides={"input_ids": [1, 40]})

    assert {name: array.shape for name, array in feeds.items()} == {
        "input_ids": (1, 40),
        "attention_mask": (1, 40),
        "token_type_ids": (1, 40),
    }
    assert warnings == []


DTYPES = [
    pytest.param("float32", -10.0, 10.0, id="float32"),
    pytest.param("float16", -10.0, 10.0, id="float16"),
    pytest.param("float64", -10.0, 10.0, id="float64"),
    pytest.param("uint8", 0, 255, id="uint8"),
    pytest.param("int32", 0, 99, id="int32"),
    pytest.param("bool", False, True, id="bool"),
]


@pytest.mark.parametrize(("dtype", "low", "high"), DTYPES)
def test_dtype_and_range(dtype: str, low, high) -> None:
    feeds, _ = synthesize_inputs([spec("data", ["batch", 64, 64], dtype)], batch_size=2)

    data = feeds["data"]
    assert data.dtype == np.dtype(dtype)
    assert data.shape == (2, 64, 64)
    assert data.min() >= low and data.max() <= high
    assert len(np.unique(data)) > 1


def test_floats_are_standard_normal() -> None:
    feeds, _ = synthesize_inputs([spec("x", [1, 100_000])], batch_size=1)

    assert abs(float(feeds["x"].mean())) < 0.02
    assert abs(float(feeds["x"].std()) - 1.0) < 0.02


@pytest.mark.parametrize(
    ("seed_a", "seed_b", "equal"),
    [pytest.param(0, 0, True, id="same-seed"), pytest.param(0, 1, False, id="other-seed")],
)
def test_synthesis_is_deterministic_by_seed(seed_a: int, seed_b: int, equal: bool) -> None:
    specs = [spec("x", ["batch", 8]), spec("ids", ["batch", 8], "int64")]

    first, _ = synthesize_inputs(specs, batch_size=2, seed=seed_a)
    second, _ = synthesize_inputs(specs, batch_size=2, seed=seed_b)

    assert all(np.array_equal(first[n], second[n]) for n in first) is equal


def test_input_data_does_not_depend_on_other_inputs() -> None:
    alone, _ = synthesize_inputs([spec("x", [2, 8])], batch_size=2)
    together, _ = synthesize_inputs([spec("y", [2, 8]), spec("x", [2, 8])], batch_size=2)

    assert np.array_equal(alone["x"], together["x"])


def test_unknown_dtype_is_invalid_spec() -> None:
    with pytest.raises(InvalidSpec, match="'bfloat16'.*Supported: float16"):
        synthesize_inputs([spec("x", [1, 2], "bfloat16")], batch_size=1)


@pytest.mark.parametrize(
    "shape",
    [
        pytest.param(["?", 3, "?", "?"], id="question-marks"),
        pytest.param([-1, 3, -1, -1], id="paddle-minus-one"),
        pytest.param(["", 3, "", ""], id="empty-names"),
    ],
)
def test_anonymous_dims_are_independent_unnamed_dims(shape: list) -> None:
    tensor = spec("x", shape)

    resolved, warnings = resolve_shape(tensor, batch_size=2, dims={"x.2": 48, "?": 5, "": 5})

    assert tensor.shape == [None, 3, None, None]
    assert resolved == (2, 3, 48, DEFAULT_DYNAMIC_DIM)
    assert warnings == [
        f"dynamic dim 3 of input 'x' set to {DEFAULT_DYNAMIC_DIM} (default); "
        "give full shapes with --shape x=D1,D2,..."
    ]
