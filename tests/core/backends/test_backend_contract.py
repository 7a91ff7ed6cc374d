"""One contract for every registered backend; the ones that cannot run here are skipped with
their own reason. Backend-specific checks (OpenVINO precision and cache, TensorRT helpers and
its real GPU path) follow the contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends import SessionOptions, backends, get_backend
from optistudio.core.backends.base import Precision
from optistudio.core.errors import BackendUnavailable, InferenceFailed, InvalidSpec, ModelLoadError

ALL_PRECISIONS = ["fp32", "fp16", "bf16", "int8"]
EXTRA_BACKENDS = {"litert"}
"""Backends of an optional extra: their cases run with `make test-extras` (marker extras)."""
AVAILABILITY = {spec.name: spec.create().availability() for spec in backends}
AVAILABLE = [name for name, a in AVAILABILITY.items() if a.ok]
UNAVAILABLE = [name for name, a in AVAILABILITY.items() if not a.ok]


def _skip_reason(name: str) -> str:
    availability = AVAILABILITY.get(name)
    return f"{name}: {availability.reason}" if availability else f"{name} is not registered"


def _backend_params() -> list[object]:
    return [
        pytest.param(
            name,
            id=name,
            marks=([] if a.ok else [pytest.mark.skip(reason=_skip_reason(name))])
            + ([pytest.mark.extras] if name in EXTRA_BACKENDS else []),
        )
        for name, a in AVAILABILITY.items()
    ]


@pytest.fixture(params=_backend_params())
def backend_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def options_for(name: str, **fields: object) -> SessionOptions:
    """Options on the first device the backend offers here."""
    return SessionOptions(device=AVAILABILITY[name].devices[0], **fields)  # type: ignore[arg-type]


def reference(model_path: Path, x: np.ndarray) -> np.ndarray:
    """relu(x @ W + b) in numpy, with the tiny model's own weights."""
    weights = {i.name: numpy_helper.to_array(i) for i in onnx.load(model_path).graph.initializer}
    return np.maximum(x @ weights["W"] + weights["b"], 0)


def inputs(batch: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)}


def unloadable_model(path: Path) -> Path:
    node = helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


# --- the contract -------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1, 4], ids=["batch1", "batch4"])
def test_runs_the_tiny_model_like_numpy(backend_name: str, tiny_model: Path, batch: int) -> None:
    model = get_backend(backend_name).load(tiny_model, options_for(backend_name))
    feeds = inputs(batch)

    outputs = model.run(feeds)

    assert len(outputs) == 1
    assert outputs[0].shape == (batch, 8)
    np.testing.assert_allclose(outputs[0], reference(tiny_model, feeds["x"]), atol=1e-4)
    model.close()


def test_one_session_serves_both_batch_sizes(backend_name: str, tiny_model: Path) -> None:
    model = get_backend(backend_name).load(tiny_model, options_for(backend_name))

    shapes = [model.run(inputs(batch))[0].shape for batch in (1, 4, 1)]

    assert shapes == [(1, 8), (4, 8), (1, 8)]


def test_threads_are_applied_or_said_to_be_ignored(backend_name: str, tiny_model: Path) -> None:
    model = get_backend(backend_name).load(tiny_model, options_for(backend_name, threads=1))

    details = model.details

    assert details.get("threads") == 1 or "threads" in details.get("ignored_options", {})


def test_memory_pool_ratio_is_recorded(backend_name: str, tiny_model: Path) -> None:
    options = options_for(backend_name, memory_pool_ratio=0.5)

    model = get_backend(backend_name).load(tiny_model, options)

    assert "memory_pool_ratio=0.5" in model.details["memory_pool"]


def test_refused_precisions_name_the_valid_ones(backend_name: str, tiny_model: Path) -> None:
    accepted, refused = [], {}
    for precision in ALL_PRECISIONS:
        try:
            get_backend(backend_name).load(
                tiny_model, options_for(backend_name, precision=precision)
            )
            accepted.append(precision)
        except InvalidSpec as exc:
            refused[precision] = exc.message
    if not refused:
        pytest.skip(f"{backend_name} accepts every precision on this machine")

    assert "fp32" in accepted
    for precision, message in refused.items():
        valid = message.split("Valid precisions", 1)[1]
        assert all(p in valid for p in accepted), message
        assert precision not in valid, message


def test_a_model_it_cannot_load_is_a_load_error(backend_name: str, tmp_path: Path) -> None:
    path = unloadable_model(tmp_path / "bad.onnx")

    with pytest.raises(ModelLoadError, match="could not (load|parse) this model"):
        get_backend(backend_name).load(path, options_for(backend_name))


def test_a_wrong_input_shape_is_an_inference_error(backend_name: str, tiny_model: Path) -> None:
    model = get_backend(backend_name).load(tiny_model, options_for(backend_name))

    with pytest.raises(InferenceFailed, match=r"inputs x=\[2, 5\]"):
        model.run({"x": np.zeros((2, 5), dtype=np.float32)})


def test_close_is_safe_twice(backend_name: str, tiny_model: Path) -> None:
    model = get_backend(backend_name).load(tiny_model, options_for(backend_name))
    model.run(inputs(1))

    model.close()
    model.close()


@pytest.mark.parametrize("name", UNAVAILABLE or ["none"])
def test_unavailable_backends_say_why_and_refuse_to_load(name: str, tiny_model: Path) -> None:
    if name == "none":
        pytest.skip("every registered backend is available here")
    reason = AVAILABILITY[name].reason

    assert reason and "Traceback" not in reason and len(reason) < 300
    with pytest.raises(BackendUnavailable):
        get_backend(name).load(tiny_model, SessionOptions(device="cuda"))


@pytest.mark.skipif(
    not {"openvino", "onnxruntime"} <= set(AVAILABLE), reason="needs openvino and onnxruntime"
)
def test_openvino_and_onnxruntime_agree(tiny_model: Path) -> None:
    feeds = inputs(4)

    ov_out = get_backend("openvino").load(tiny_model, SessionOptions()).run(feeds)[0]
    ort_out = get_backend("onnxruntime").load(tiny_model, SessionOptions()).run(feeds)[0]

    np.testing.assert_allclose(ov_out, ort_out, atol=1e-4, rtol=0)


# --- OpenVINO -----------------------------------------------------------------------------

needs_openvino = pytest.mark.skipif("openvino" not in AVAILABLE, reason=_skip_reason("openvino"))


def qdq_model(path: Path) -> Path:
    """y = DQ(Q(x)) @ DQ(W_int8): a QDQ-quantized MatMul, as a static INT8 pass writes it."""
    rng = np.random.default_rng(0)
    w_int8 = rng.integers(-127, 127, (16, 8)).astype(np.int8)
    initializers = [
        numpy_helper.from_array(w_int8, "Wq"),
        numpy_helper.from_array(np.array(0.01, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "w_zero"),
        numpy_helper.from_array(np.array(0.02, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(128, np.uint8), "x_zero"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
        helper.make_node("DequantizeLinear", ["Wq", "w_scale", "w_zero"], ["W"]),
        helper.make_node("MatMul", ["xd", "W"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
        initializer=initializers,
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@needs_openvino
def test_openvino_fp32_really_compiles_f32(tiny_model: Path) -> None:
    # On CPUs with BF16, OpenVINO's default would be bf16; fp32 must mean f32.
    details = get_backend("openvino").load(tiny_model, SessionOptions()).details

    assert details["inference_precision"] == "fp32"
    assert set(details["layer_precisions"]) == {"f32"}
    assert "fallback" not in details


@needs_openvino
def test_openvino_records_hint_streams_and_threads(tiny_model: Path) -> None:
    options = SessionOptions(threads=1, performance_hint="throughput", streams=1)

    details = get_backend("openvino").load(tiny_model, options).details

    assert (details["threads"], details["streams"]) == (1, 1)
    assert details["performance_hint"] == "throughput"
    assert details["execution_devices"] == ["CPU"]


@needs_openvino
def test_openvino_int8_runs_a_qdq_model_in_int8(tmp_path: Path) -> None:
    model = get_backend("openvino").load(
        qdq_model(tmp_path / "q.onnx"), SessionOptions(precision="int8")
    )

    layers = model.details["layer_precisions"]

    assert layers.get("u8", 0) + layers.get("i8", 0) > 0
    assert "fallback" not in model.details
    assert model.run(inputs(2))[0].shape == (2, 8)


@needs_openvino
def test_openvino_int8_on_a_float_model_reports_the_fallback(tiny_model: Path) -> None:
    details = get_backend("openvino").load(tiny_model, SessionOptions(precision="int8")).details

    assert "not quantized" in details["fallback"]


@needs_openvino
def test_openvino_second_load_comes_from_the_cache(tiny_model: Path, tmp_path: Path) -> None:
    options = SessionOptions(cache_dir=str(tmp_path / "cache"))
    backend = get_backend("openvino")

    first = backend.load(tiny_model, options).details
    second = backend.load(tiny_model, options).details

    assert (first["loaded_from_cache"], second["loaded_from_cache"]) == (False, True)


@needs_openvino
def test_openvino_refuses_a_device_it_does_not_see(tiny_model: Path) -> None:
    with pytest.raises(InvalidSpec, match="Valid kinds: cpu, gpu, npu"):
        get_backend("openvino").load(tiny_model, SessionOptions(device="cuda:0"))


# --- TensorRT: what runs without it, then the real path ----------------------------------


def test_tensorrt_refuses_bf16_before_touching_the_runtime(tiny_model: Path) -> None:
    with pytest.raises(InvalidSpec, match="Valid precisions: fp32, fp16, int8"):
        get_backend("tensorrt").load(tiny_model, SessionOptions(precision="bf16"))


def test_tensorrt_checks_feeds_against_static_dims() -> None:
    from optistudio.core.backends.tensorrt_backend import check_feeds

    expected = {"x": ((-1, 16), np.dtype(np.float32))}
    check_feeds(expected, {"x": np.zeros((3, 16), np.float32)})

    with pytest.raises(InferenceFailed, match=r"inputs x=\[2, 5\]"):
        check_feeds(expected, {"x": np.zeros((2, 5), np.float32)})
    with pytest.raises(InferenceFailed, match="float32"):
        check_feeds(expected, {"x": np.zeros((2, 16), np.float64)})


def test_tensorrt_engine_names_change_with_what_changes_the_engine() -> None:
    from optistudio.core.backends.tensorrt_backend import engine_file_name

    base = ("abc", "fp16", (("x", (1, 16)),), "10.3.0", "sm90")
    names = {
        engine_file_name(*base),
        engine_file_name("abd", *base[1:]),
        engine_file_name(base[0], "fp32", *base[2:]),
        engine_file_name(*base[:2], (("x", (4, 16)),), *base[3:]),
        engine_file_name(*base[:3], "10.4.0", base[4]),
        engine_file_name(*base[:4], "sm89"),
    }

    assert len(names) == 6
    assert all(name.endswith(".engine") for name in names)


def test_tensorrt_reads_layer_precisions_and_spots_a_fallback() -> None:
    from optistudio.core.backends.tensorrt_backend import count_layer_precisions, precision_fallback

    info = {
        "Layers": [
            {"Name": "a", "Outputs": [{"Format/Datatype": "Row major linear FP16 format"}]},
            {"Name": "b", "Outputs": [{"Format/Datatype": "Row major linear FP32"}]},
            {"Name": "c", "Outputs": [{"Format/Datatype": "Channel major INT8 format"}]},
        ]
    }

    layers = count_layer_precisions(info)

    assert layers == {"fp16": 1, "fp32": 1, "int8": 1}
    assert precision_fallback("fp16", layers) is None
    assert "no layer runs in fp16" in (precision_fallback("fp16", {"fp32": 3}) or "")


def test_tensorrt_says_which_options_it_ignores() -> None:
    from optistudio.core.backends.tensorrt_backend import ignored_options

    ignored = ignored_options(SessionOptions(threads=2, performance_hint="latency"))

    assert set(ignored) == {"threads", "performance_hint"}


needs_tensorrt = pytest.mark.skipif("tensorrt" not in AVAILABLE, reason=_skip_reason("tensorrt"))


@pytest.mark.gpu
@pytest.mark.tensorrt
@needs_tensorrt
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_tensorrt_builds_runs_and_caches_engines(
    precision: Precision, tiny_model: Path, tmp_path: Path
) -> None:
    options = SessionOptions(device="cuda", precision=precision, cache_dir=str(tmp_path))
    backend = get_backend("tensorrt")
    feeds = inputs(4)

    first = backend.load(tiny_model, options)
    output = first.run(feeds)[0]
    second = backend.load(tiny_model, options)
    second.run(feeds)

    np.testing.assert_allclose(output, reference(tiny_model, feeds["x"]), atol=2e-2)
    assert [e["from_cache"] for e in second.details["engines"]] == [True]
    assert (tmp_path / "tensorrt.timing.cache").exists()
