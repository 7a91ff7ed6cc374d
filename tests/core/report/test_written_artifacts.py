"""What the project writes, checked by the ecosystems' own tools: every .onnx by
`onnx.checker.check_model(full_check=True)`, every config.pbtxt by Triton's ModelConfig protobuf
(tritonclient's model_config_pb2) and Triton's repository rules."""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.batching.settings import BatchingSettings
from optistudio.core.batching.triton import triton_config
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.model.intake import inspect_model
from optistudio.core.optimize.run import OptimizeSpec, optimize
from optistudio.core.report.bundle import BundleSource, write_bundle
from optistudio.studio.batching_export import triton_text

QUICK = ComparisonSpec(min_pairs=10, min_seconds=0.05, max_seconds=1.0, threads=1)
RECIPES = ["graph", "fusion", "fp16", "int8_dynamic", "int8_static", "dynamic_batch", "free_dims"]


def model_config_pb2() -> ModuleType:
    """Triton's ModelConfig protobuf module, read from tritonclient's own file (importing the
    package `tritonclient.grpc` would need grpcio, which parsing does not)."""
    found = importlib.util.find_spec("tritonclient")
    assert found is not None and found.submodule_search_locations
    path = Path(next(iter(found.submodule_search_locations))) / "grpc" / "model_config_pb2.py"
    spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MODEL_CONFIG = model_config_pb2()


def parsed(text: str) -> Any:
    """The config as Triton reads it (a ParseError on anything ModelConfig does not have)."""
    return text_format.Parse(text, MODEL_CONFIG.ModelConfig())


def ir3_pinned(path: Path) -> Path:
    """An old file (IR 3, opset 8, weights listed as inputs as that IR requires) whose batch is
    fixed at 1 by a Reshape target: x [1, 12] -> Reshape [1, 2, 6] -> MatMul W -> y [1, 2, 3]."""
    weights = [
        numpy_helper.from_array(np.array([1, 2, 6], np.int64), "target"),
        numpy_helper.from_array(np.linspace(-1, 1, 18, dtype=np.float32).reshape(6, 3), "W"),
    ]
    graph = helper.make_graph(
        [
            helper.make_node("Reshape", ["x", "target"], ["r"]),
            helper.make_node("MatMul", ["r", "W"], ["y"]),
        ],
        "pinned",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 12])]
        + [helper.make_tensor_value_info(w.name, w.data_type, list(w.dims)) for w in weights],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)], ir_version=3)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def mixing(path: Path) -> Path:
    """x [1, 4] -> Flatten(axis 0) -> [1, 4]: the batch folded, so its rewrite is refused."""
    graph = helper.make_graph(
        [helper.make_node("Flatten", ["x"], ["y"], axis=0)],
        "mixing",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def bundle(model: Path, folder: Path, serving: dict[str, Any] | None = None) -> Path:
    source = BundleSource(
        name=model.stem,
        model_path=model,
        info=inspect_model(model),
        batch_sizes=[1],
        coreml_precisions=[],
        serving=serving,
    )
    return write_bundle(source, folder / f"{model.stem}.zip").path


def repository(archive: Path, target: Path) -> dict[str, Any]:
    """The bundle's Triton repository unzipped, each model's config checked against Triton's
    rules: <repo>/<model>/config.pbtxt, its name the folder's, <model>/1/<its file>."""
    with zipfile.ZipFile(archive) as z:
        z.extractall(target)
    configs = {}
    for path in sorted((target / "triton").glob("*/config.pbtxt")):
        config = parsed(path.read_text())
        assert config.name == path.parent.name
        filename = config.default_model_filename or "model.onnx"
        assert (path.parent / "1" / filename).is_file()
        assert config.platform == "onnxruntime_onnx" or config.backend == "openvino"
        configs[config.name] = config
    assert configs, f"no Triton model in {archive.name}"
    return configs


def test_a_variant_made_for_openvino_is_a_triton_openvino_model(
    tiny_model: Path, tmp_path: Path
) -> None:
    source = BundleSource(
        name="tiny_bf16",
        model_path=tiny_model,
        info=inspect_model(tiny_model),
        recipe={"name": "bf16", "backend": "openvino"},
        coreml_precisions=[],
    )
    archive = write_bundle(source, tmp_path / "b.zip").path

    (config,) = repository(archive, tmp_path / "out").values()

    assert config.backend == "openvino" and config.default_model_filename == "model.onnx"


def test_a_config_without_batching_parses(tmp_path: Path) -> None:
    info = inspect_model(ir3_pinned(tmp_path / "pinned.onnx"))
    text = triton_config(
        "pinned", info, max_batch_size=0, preferred_batch_sizes=[], max_queue_delay_us=0
    )
    config = parsed(text)
    assert config.max_batch_size == 0 and list(config.input[0].dims) == [1, 12]


@pytest.mark.parametrize("serving", ["default", "verified"])
def test_a_free_batch_is_served_batched_at_the_stored_setting(
    tiny_model: Path, tmp_path: Path, serving: str
) -> None:
    setting = BatchingSettings(max_batch_size=16, preferred_batch_sizes=[4, 16], instances=2)
    stored = setting.model_dump(mode="json") | {"verify_job": 7} if serving == "verified" else None

    (config,) = repository(bundle(tiny_model, tmp_path, stored), tmp_path / "out").values()

    want = setting if stored else BatchingSettings(max_batch_size=8, preferred_batch_sizes=[4, 8])
    assert config.max_batch_size == want.max_batch_size > 1
    assert config.HasField("dynamic_batching")
    assert list(config.dynamic_batching.preferred_batch_size) == want.preferred_batch_sizes
    assert config.instance_group[0].count == want.instances
    assert config.input[0].dims == [16]  # the batch dim left to Triton


def test_the_studio_batching_page_config_is_a_triton_model_config(tiny_model: Path) -> None:
    settings = BatchingSettings(max_batch_size=8, preferred_batch_sizes=[4], instances=2)
    config = parsed(triton_text("tiny.onnx", inspect_model(tiny_model), settings))
    assert config.name == "tiny" and config.max_batch_size == 8
    assert list(config.dynamic_batching.preferred_batch_size) == [4]


def test_a_fixed_batch_whose_rewrite_is_refused_gets_max_batch_size_0(tmp_path: Path) -> None:
    served = BatchingSettings(max_batch_size=8, instances=2).model_dump(mode="json")

    archive = bundle(mixing(tmp_path / "mixing.onnx"), tmp_path, served)

    (config,) = repository(archive, tmp_path / "out").values()

    assert config.max_batch_size == 0 and not config.HasField("dynamic_batching")
    assert config.instance_group[0].count == 2
    assert list(config.input[0].dims) == [1, 4]  # declared as it is, its batch of 1 included


def test_every_onnx_the_project_writes_passes_the_full_checker(tmp_path: Path) -> None:
    """Optimize's variants (dynamic_batch and free_dims among them), and every .onnx in the
    bundle (the model, the Triton repository's batch-freed rewrite), from an IR 3 file."""
    model = ir3_pinned(tmp_path / "pinned.onnx")
    report = optimize(
        model,
        OptimizeSpec(recipes=RECIPES, comparison=QUICK, accuracy_samples=4),
        out_dir=tmp_path / "variants",
    )
    written = [Path(v.path) for v in report.variants if v.path and v.path.endswith(".onnx")]
    made = {v.recipe.name for v in report.variants if v.path}
    assert {"dynamic_batch", "graph", "int8_static"} <= made, [
        (v.recipe.name, v.status, v.error) for v in report.variants
    ]
    archive = bundle(model, tmp_path)
    repository(archive, tmp_path / "bundle")
    written += sorted((tmp_path / "bundle").rglob("*.onnx"))
    assert any("triton" in path.parts for path in written)

    for path in written:
        onnx.checker.check_model(str(path), full_check=True)
