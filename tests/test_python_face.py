"""The Python face: the README's example runs as written, and each of the three names
(`PipelineOptimizer`, `register_fusion_pattern`, `InferenceBackend`) does what it says."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import psutil
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio import DeviceType, InferenceBackend, PipelineOptimizer, register_fusion_pattern
from optistudio.core.errors import InferenceFailed, InvalidSpec, UnknownName
from optistudio.core.fusion import fusion_patterns
from optistudio.core.fusion.apply import numerical_check
from optistudio.core.fusion.specs import CONV_RELU
from optistudio.core.fusion.user import UserFusionPattern, unregister_fusion_pattern
from optistudio.core.passes.base import PassContext, passes

REPO = Path(__file__).resolve().parents[1]
WAIT = 10  # seconds a future may take; the batching tests hold batches for at most 9 s


def readme_example() -> str:
    """The first python block after the README's "## Python" heading."""
    text = (REPO / "README.md").read_text()
    section = text.split("\n## Python\n", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "no python block after '## Python'"
    return match.group(1)


def direct(model: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The model's outputs straight from an ONNX Runtime session."""
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def rows(count: int, seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((count, 16)).astype(np.float32)}


# --- the README ------------------------------------------------------------------------------


def test_the_readme_example_runs_and_prints_what_it_says(tmp_path: Path) -> None:
    code = readme_example()
    assert len(code.splitlines()) <= 35

    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=240
    )

    assert done.returncode == 0, done.stderr
    matches, last = done.stdout.strip().splitlines()
    assert ast.literal_eval(matches) == {"my_conv_relu": 1}
    difference, batch_size = last.split()
    assert float(difference) <= 1e-5
    assert 1 <= int(batch_size) <= 4
    assert [node.op_type for node in onnx.load(tmp_path / "fused.onnx").graph.node] == ["FusedConv"]


def test_the_root_package_exports_lazily_and_db_stays_light() -> None:
    code = (
        "import sys, optistudio.db, optistudio; "
        "heavy = [m for m in ('numpy', 'onnx', 'onnxruntime', 'onnxscript') if m in sys.modules]; "
        "print(heavy, sorted(optistudio.__all__), 'PipelineOptimizer' in dir(optistudio))"
    )

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "[]",
        "['DeviceType',",
        "'InferenceBackend',",
        "'PipelineOptimizer',",
        "'register_fusion_pattern']",
        "True",
    ]


def test_an_unknown_root_attribute_is_an_attribute_error() -> None:
    import optistudio

    with pytest.raises(AttributeError, match="no attribute 'Pipeline'"):
        optistudio.Pipeline  # noqa: B018 - the access is the test


# --- InferenceBackend ------------------------------------------------------------------------


def test_inference_backend_predicts_like_onnxruntime(tiny_model: Path) -> None:
    feeds = rows(3)

    with InferenceBackend.create("cpu").load(tiny_model) as backend:
        outputs = backend.predict(feeds)

    assert backend.name == "onnxruntime"
    np.testing.assert_array_equal(outputs[0], direct(tiny_model, feeds)[0])


@pytest.mark.parametrize(
    "device", [DeviceType.CPU, "CPU", "cpu", " Cpu "], ids=["enum", "upper", "lower", "mixed"]
)
def test_inference_backend_takes_the_device_as_the_enum_or_in_any_case(
    tiny_model: Path, device: DeviceType | str
) -> None:
    with InferenceBackend.create(device).load(tiny_model) as backend:
        outputs = backend.predict(rows(2))

    assert backend.options.device == "cpu" and backend.name == "onnxruntime"
    np.testing.assert_array_equal(outputs[0], direct(tiny_model, rows(2))[0])


def test_a_cuda_device_in_capitals_is_the_same_device() -> None:
    from optistudio.core.backends.predictor import session_options_from

    assert session_options_from({"device": "CUDA:1"}).device == "cuda:1"
    assert session_options_from({"device": DeviceType.CUDA}).device == "cuda"


def test_predict_takes_one_array_for_a_one_input_model(tiny_model: Path) -> None:
    array = rows(3)["x"]

    with InferenceBackend.create("cpu").load(tiny_model) as backend:
        outputs = backend.predict(array)

    np.testing.assert_array_equal(outputs[0], direct(tiny_model, {"x": array})[0])


def two_input_model(path: Path) -> Path:
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        "add",
        [info("a", TensorProto.FLOAT, ["n", 4]), info("b", TensorProto.FLOAT, ["n", 4])],
        [info("y", TensorProto.FLOAT, ["n", 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def test_one_array_for_a_two_input_model_is_refused_naming_the_inputs(tmp_path: Path) -> None:
    model = two_input_model(tmp_path / "add.onnx")

    with InferenceBackend.create("cpu").load(model) as backend:
        with pytest.raises(InvalidSpec, match=r"2 inputs \(a, b\)") as caught:
            backend.predict(np.ones((1, 4), np.float32))
        both = backend.predict({"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)})

    assert "dict" in (caught.value.hint or "")
    np.testing.assert_array_equal(both[0], np.full((1, 4), 2, np.float32))


def test_inference_backend_takes_a_named_backend_model_and_options(tiny_model: Path) -> None:
    backend = InferenceBackend.create("cpu", backend="onnxruntime", model=tiny_model, threads=1)

    assert backend.details["threads"] == 1
    assert backend.predict(rows(2))[0].shape == (2, 8)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"backend": "onnxrt"}, UnknownName, "Valid names: .*onnxruntime"),
        ({"thread": 2}, InvalidSpec, "thread"),
        ({"memory_pool_ratio": 0}, InvalidSpec, "memory_pool_ratio"),
    ],
    ids=["unknown-backend", "misspelt-option", "ratio-zero"],
)
def test_inference_backend_refuses_bad_arguments(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        InferenceBackend.create("cpu", **kwargs)  # type: ignore[arg-type]


def test_predict_before_load_says_what_to_do() -> None:
    with pytest.raises(InvalidSpec, match="No model is loaded") as caught:
        InferenceBackend.create("cpu").predict(rows(1))
    assert "load" in (caught.value.hint or "")


# --- PipelineOptimizer -----------------------------------------------------------------------


def test_pipeline_optimizer_is_built_from_the_three_keywords() -> None:
    optimizer = PipelineOptimizer(max_batch_size=32, timeout_ms=50, memory_pool_ratio=0.8)

    settings = optimizer.settings
    assert (settings.max_batch_size, settings.timeout_ms, settings.memory_pool_ratio) == (
        32,
        50,
        0.8,
    )


def test_concurrent_requests_leave_as_one_batch_with_each_its_own_rows(tiny_model: Path) -> None:
    requests = [rows(1, seed) for seed in range(4)]
    futures: list = [None] * 4

    def send(index: int) -> None:
        futures[index] = optimizer.submit(requests[index])

    with PipelineOptimizer(max_batch_size=4, timeout_ms=9_000) as optimizer:
        optimizer.load(tiny_model, threads=1)
        threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        responses = [future.result(WAIT) for future in futures]
        stats = optimizer.stats

    assert [response.batch_size for response in responses] == [4, 4, 4, 4]
    assert stats is not None and stats.batches == 1
    for request, response in zip(requests, responses, strict=True):
        np.testing.assert_allclose(response.outputs[0], direct(tiny_model, request)[0], atol=1e-6)


def test_predict_returns_the_outputs_of_its_own_rows(tiny_model: Path) -> None:
    feeds = rows(3)

    with PipelineOptimizer(max_batch_size=8, timeout_ms=1).load(tiny_model) as optimizer:
        outputs = optimizer.predict(feeds, timeout=WAIT)
        from_array = optimizer.predict(feeds["x"], timeout=WAIT)  # one input: a bare array

    np.testing.assert_allclose(outputs[0], direct(tiny_model, feeds)[0], atol=1e-6)
    np.testing.assert_array_equal(from_array[0], outputs[0])


def test_close_runs_what_is_queued_then_refuses_requests(tiny_model: Path) -> None:
    optimizer = PipelineOptimizer(max_batch_size=8, timeout_ms=9_000).load(tiny_model)
    queued = optimizer.submit(rows(1))

    optimizer.close()

    assert queued.result(WAIT).batch_size == 1  # drained, not held for the 9 s timeout
    assert optimizer.stats is None
    with pytest.raises(InvalidSpec, match="No model is loaded"):
        optimizer.predict(rows(1))
    optimizer.close()  # closing twice is harmless


def test_a_second_load_is_refused_until_close(tiny_model: Path) -> None:
    with PipelineOptimizer().load(tiny_model) as optimizer:
        refused = pytest.raises(InvalidSpec, match="serves a model already")
        with refused:
            optimizer.load(tiny_model)


def test_a_batch_fixed_at_1_is_served_through_its_rewrite_and_a_fixed_2_refused(
    make_model,
) -> None:
    with PipelineOptimizer(max_batch_size=4).load(make_model(batch=1)) as optimizer:
        assert "batch is fixed at 1" in optimizer.note
        assert optimizer.predict({"x": np.ones((1, 16), dtype=np.float32)})[0].shape == (1, 8)
    with pytest.raises(InvalidSpec, match="fixed first dimension of 2"):
        PipelineOptimizer().load(make_model(batch=2))


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"memory_pool_ratio": 0}, "memory_pool_ratio"),
        ({"memory_pool_ratio": 1.5}, "memory_pool_ratio"),
        ({"max_batch_size": 0}, "max_batch_size"),
        ({"max_batch": 4}, "max_batch"),
    ],
    ids=["ratio-zero", "ratio-above-one", "batch-zero", "misspelt"],
)
def test_bad_settings_are_refused_naming_the_field(settings: dict[str, float], field: str) -> None:
    with pytest.raises(InvalidSpec, match=field):
        PipelineOptimizer(**settings)


def test_memory_pool_ratio_caps_each_session_on_the_cpu(tiny_model: Path) -> None:
    ratio = 16 * 1024 / psutil.virtual_memory().total  # a 16 KiB arena per session

    with PipelineOptimizer(max_batch_size=1024, timeout_ms=1, memory_pool_ratio=ratio) as capped:
        capped.load(tiny_model)
        small = capped.predict(rows(1), timeout=WAIT)
        with pytest.raises(InferenceFailed, match="failed"):
            capped.predict(rows(1024), timeout=WAIT)  # 32 KiB of output alone
        after = capped.predict(rows(1), timeout=WAIT)  # only that batch failed

    np.testing.assert_allclose(small[0], direct(tiny_model, rows(1))[0], atol=1e-6)
    np.testing.assert_array_equal(after[0], small[0])
    with PipelineOptimizer(max_batch_size=1024, timeout_ms=1).load(tiny_model) as uncapped:
        assert uncapped.predict(rows(1024), timeout=WAIT)[0].shape == (1024, 8)


# --- register_fusion_pattern -----------------------------------------------------------------


@pytest.fixture
def user_patterns() -> Iterator[None]:
    """Takes back every pattern a test registers, so the built-ins are as they were."""
    yield
    for pattern in list(fusion_patterns):
        if isinstance(pattern, UserFusionPattern):
            unregister_fusion_pattern(pattern.name)


def conv_model(path: Path, activation: str = "Relu", *, other_user: bool = False) -> Path:
    """x -> Conv -> activation -> y (and Conv -> Sigmoid -> z when it has another user)."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node(activation, ["c"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])]
    if other_user:
        nodes.append(helper.make_node("Sigmoid", ["c"], ["z"]))
        outputs.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, ["n", 4, 8, 8]))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])]
    graph = helper.make_graph(nodes, "conv", inputs, outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


def run_fusion(tmp_path: Path, model: Path, patterns: list[str] | None) -> tuple[dict, list[str]]:
    out = tmp_path / "fused.onnx"
    report = passes.get("fusion").run(
        model, out, {"patterns": patterns}, PassContext(work_dir=tmp_path)
    )
    return report.details, [node.op_type for node in onnx.load(out).graph.node]


def images(batch: int = 2) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(3).standard_normal((batch, 3, 8, 8)).astype(np.float32)}


def test_a_bare_predicate_is_applied_by_the_fusion_pass(
    tmp_path: Path, user_patterns: None
) -> None:
    @register_fusion_pattern
    def conv_relu(node):
        return node.op_type == "Conv" and len(node.users) == 1 and node.users[0].op_type == "Relu"

    model = conv_model(tmp_path / "conv.onnx")

    details, ops = run_fusion(tmp_path, model, None)  # every registered pattern, in order

    assert isinstance(fusion_patterns.get("conv_relu"), UserFusionPattern)
    assert conv_relu.__name__ == "conv_relu"  # the decorator hands the function back
    assert details["matches"]["conv_relu"] == 1
    assert ops == ["FusedConv"]
    assert numerical_check(model, tmp_path / "fused.onnx", feeds=images()) <= 1e-4


def test_a_bare_predicate_does_not_fire_where_it_says_no(
    tmp_path: Path, user_patterns: None
) -> None:
    @register_fusion_pattern
    def lonely_conv_relu(node):
        return node.op_type == "Conv" and len(node.users) == 1 and node.users[0].op_type == "Relu"

    shared = conv_model(tmp_path / "shared.onnx", other_user=True)
    clipped = conv_model(tmp_path / "clipped.onnx", activation="Clip")

    for model, ops in ((shared, ["Conv", "Relu", "Sigmoid"]), (clipped, ["Conv", "Clip"])):
        details, fused_ops = run_fusion(tmp_path, model, ["lonely_conv_relu"])
        assert details["matches"] == {"lonely_conv_relu": 0}
        assert fused_ops == ops


def test_a_fuse_function_rewrites_the_pair(tmp_path: Path, user_patterns: None) -> None:
    def one_relu(op, head):
        return op.Relu(head.inputs[0])  # relu(relu(x)) = relu(x)

    @register_fusion_pattern(name="relu_relu", fuse=one_relu)
    def double_relu(node):
        return node.op_type == "Relu" and node.users[0].op_type == "Relu"

    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    info = helper.make_tensor_value_info
    graph = helper.make_graph(
        nodes,
        "relus",
        [info("x", TensorProto.FLOAT, ["n", 4])],
        [info("y", TensorProto.FLOAT, ["n", 4])],
    )
    model = tmp_path / "relus.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)

    details, ops = run_fusion(tmp_path, model, ["relu_relu"])

    assert details["matches"] == {"relu_relu": 1}
    assert ops == ["Relu"]
    assert fusion_patterns.get("relu_relu").backends == ["*"]


def test_a_bare_predicate_on_a_pair_no_rule_fuses_asks_for_fuse(
    tmp_path: Path,
    user_patterns: None,
) -> None:
    @register_fusion_pattern
    def conv_sigmoid(node):
        return node.op_type == "Conv"

    model = conv_model(tmp_path / "conv.onnx", activation="Sigmoid")

    with pytest.raises(InvalidSpec, match="Conv→Sigmoid") as caught:
        run_fusion(tmp_path, model, ["conv_sigmoid"])
    assert "fuse=" in (caught.value.hint or "")


def test_taking_a_pattern_back_restores_the_built_in(user_patterns: None) -> None:
    register_fusion_pattern(lambda node: False, name="conv_relu")
    assert fusion_patterns.get("conv_relu").default_order == CONV_RELU.default_order

    unregister_fusion_pattern("conv_relu")

    assert fusion_patterns.get("conv_relu") == CONV_RELU
    with pytest.raises(InvalidSpec, match="not a fusion pattern registered in this process"):
        unregister_fusion_pattern("conv_relu")


def test_a_name_that_is_not_snake_case_is_refused(user_patterns: None) -> None:
    def ConvRelu(node):  # noqa: N802 - the bad name is the test
        return False

    with pytest.raises(ValueError, match="snake_case"):
        register_fusion_pattern(ConvRelu)
