"""Core ML export: packages made and read back on Linux (the `coreml` extra), the bundle with and
without the extra, and the `coreml` backend that says where its packages run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from optistudio.core.backends.base import SessionOptions
from optistudio.core.backends.coreml_backend import CoreMLBackend
from optistudio.core.backends.inventory import hardware_inventory
from optistudio.core.backends.specs import COREML
from optistudio.core.errors import BackendUnavailable
from optistudio.core.model.intake import inspect_model
from optistudio.core.report import coreml
from optistudio.core.report.bundle import BundleSource, verify_bundle, write_bundle


def needs_extra() -> None:
    """Skip, saying what is missing, unless coremltools, torch and the torch bridge import."""
    absent = coreml.missing()
    if absent:
        pytest.skip(absent)
    pytest.importorskip("optistudio.core.torch_bridge.convert", reason="the torch bridge is absent")


def bundle_of(path: Path, out: Path, **kwargs: object) -> Path:
    source = BundleSource(name="wide", model_path=path, info=inspect_model(path), **kwargs)  # type: ignore[arg-type]
    return write_bundle(source, out).path


def read_json(bundle: Path, member: str) -> dict:
    with zipfile.ZipFile(bundle) as z:
        return dict(json.loads(z.read(member)))


@pytest.fixture
def wide_model(make_model: Callable[..., Path]) -> Path:
    """relu(x @ W + b) with W 512x8: big enough (4096 weights) for INT8 weight quantization."""
    return make_model("wide.onnx", features=512)


# -- without the extra: said, never faked ------------------------------------------------------


def test_without_the_extra_the_bundle_says_what_is_missing_and_how_to_add_it(
    wide_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "coremltools", None)  # `import coremltools` now fails

    bundle = bundle_of(wide_model, tmp_path / "b.zip")

    reason = read_json(bundle, "manifest.json")["skipped"]["coreml"]
    assert "coremltools" in reason and "pip install 'optistudio[coreml]'" in reason
    with zipfile.ZipFile(bundle) as z:
        assert not [m for m in z.namelist() if m.startswith("coreml/")]
    assert verify_bundle(bundle) == []
    served = read_json(bundle, "pipeline.json")
    assert served["coreml"]["packages"] == []
    assert served["runs_on"]["coreml"] == "Core ML runs on macOS / iOS only — not run here"


def test_asking_for_no_package_is_said_too(wide_model: Path, tmp_path: Path) -> None:
    bundle = bundle_of(wide_model, tmp_path / "b.zip", coreml_precisions=[])
    assert read_json(bundle, "manifest.json")["skipped"]["coreml"] == (
        "No Core ML package was asked for."
    )


# -- the coreml backend: listed, never run -----------------------------------------------------


def test_the_coreml_backend_is_unavailable_with_where_it_runs() -> None:
    availability = CoreMLBackend().availability()
    assert not availability.ok and availability.devices == []
    assert "macOS / iOS only — not run here" in availability.reason
    with pytest.raises(BackendUnavailable, match="macOS / iOS only"):
        CoreMLBackend().load(Path("m.onnx"), SessionOptions())
    assert COREML.name == "coreml" and COREML.create().name == "coreml"


def test_backends_json_and_the_inventory_list_coreml_with_its_reason(tmp_path: Path) -> None:
    env = dict(os.environ, OPTISTUDIO_DATA_DIR=str(tmp_path / "data"))
    env.pop("OPTISTUDIO_DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-m", "optistudio.cli", "backends", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    listed = {entry["name"]: entry for entry in json.loads(done.stdout)}
    assert "coreml" in listed, "reinstall the package (make install) so its entry points load"
    assert listed["coreml"]["available"] is False and listed["coreml"]["devices"] == []
    assert "macOS / iOS only — not run here" in listed["coreml"]["reason"]
    entry = hardware_inventory()["backends"]["coreml"]
    assert entry["available"] is False and "not run here" in entry["reason"]


# -- with the extra: real packages, read back --------------------------------------------------


@pytest.mark.extras
def test_packages_have_the_onnx_models_names_types_and_shapes(
    wide_model: Path, tmp_path: Path
) -> None:
    needs_extra()
    info = inspect_model(wide_model)

    made = coreml.export_coreml(wide_model, info, tmp_path, name="wide")

    assert made.skipped == {}
    assert [p.precision for p in made.packages] == ["fp32", "fp16", "int8"]
    for package in made.packages:
        spec = coreml.read_spec(package.path)  # read again, independently of the export's check
        assert spec.WhichOneof("Type") == "mlProgram"
        (x,), (y,) = spec.description.input, spec.description.output
        assert (x.name, list(x.type.multiArrayType.shape)) == ("x", [1, 512])
        assert y.name == "y"
        assert x.type.multiArrayType.dataType == y.type.multiArrayType.dataType
        assert package.inputs == [{"name": "x", "type": "FLOAT32", "shape": [1, 512]}]
        assert package.notes == ["Input x is fixed at [1, 512] (dynamic in ONNX: ['batch', 512])."]


@pytest.mark.extras
def test_fp16_computes_in_fp16_and_int8_stores_int8_weights(
    wide_model: Path, tmp_path: Path
) -> None:
    needs_extra()
    made = coreml.export_coreml(wide_model, inspect_model(wide_model), tmp_path, name="wide")
    by_precision = {p.precision: p for p in made.packages}

    assert by_precision["int8"].quantized_weights >= 1
    assert by_precision["fp32"].quantized_weights == 0
    assert "fp16" in _tensor_types(by_precision["fp16"].path)
    assert "fp16" not in _tensor_types(by_precision["fp32"].path)
    sizes = {p: _weights_bytes(by_precision[p].path) for p in ("fp32", "fp16", "int8")}
    assert sizes["int8"] < sizes["fp16"] < sizes["fp32"]


@pytest.mark.extras
def test_the_bundle_holds_a_package_per_precision_and_says_where_they_run(
    wide_model: Path, tmp_path: Path
) -> None:
    needs_extra()
    bundle = bundle_of(wide_model, tmp_path / "b.zip")

    assert verify_bundle(bundle) == []
    assert "coreml" not in read_json(bundle, "manifest.json")["skipped"]
    with zipfile.ZipFile(bundle) as z:
        names = z.namelist()
    for precision in ("fp32", "fp16", "int8"):
        assert f"coreml/wide_{precision}.mlpackage/Manifest.json" in names
    served = read_json(bundle, "pipeline.json")["coreml"]
    assert [p["package"] for p in served["packages"]] == [
        f"coreml/wide_{p}.mlpackage" for p in ("fp32", "fp16", "int8")
    ]
    assert served["runs_on"] == "runs on macOS / iOS only — not run here"
    assert set(served["versions"]) == {"coremltools", "torch"}
    assert served["checked"].startswith("traced PyTorch module: outputs agree with onnxruntime")
    with zipfile.ZipFile(bundle) as z:
        z.extractall(tmp_path / "unzipped")
    spec = coreml.read_spec(tmp_path / "unzipped" / "coreml" / "wide_int8.mlpackage")
    assert coreml.quantized_weights(spec) >= 1


@pytest.mark.extras
def test_an_op_the_route_lacks_is_a_skipped_part_naming_it(tmp_path: Path) -> None:
    needs_extra()
    path = tmp_path / "einsum.onnx"
    graph = helper.make_graph(
        [helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")],
        "einsum",
        [
            helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
            helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    bundle = bundle_of(path, tmp_path / "b.zip")

    reason = read_json(bundle, "manifest.json")["skipped"]["coreml"]
    assert "does not support the ops Einsum" in reason
    assert read_json(bundle, "pipeline.json")["coreml"]["packages"] == []


@pytest.mark.extras
def test_int64_ids_and_dotted_names_are_said_as_core_ml_has_them(tmp_path: Path) -> None:
    needs_extra()
    path = tmp_path / "gather.onnx"
    table = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((100, 300)).astype(np.float32), "table"
    )
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids.1"], ["g"], axis=0),
            helper.make_node("Relu", ["g"], ["emb/out"]),
        ],
        "gather",
        [helper.make_tensor_value_info("ids.1", TensorProto.INT64, [1, 4])],
        [helper.make_tensor_value_info("emb/out", TensorProto.FLOAT, [1, 4, 300])],
        initializer=[table],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)

    made = coreml.export_coreml(path, inspect_model(path), tmp_path, name="g", precisions=["int8"])

    (package,) = made.packages
    assert package.inputs == [
        {"name": "ids_1", "type": "INT32", "shape": [1, 4], "onnx_name": "ids.1"}
    ]
    assert package.outputs == [
        {"name": "emb_out", "type": "FLOAT32", "shape": [1, 4, 300], "onnx_name": "emb/out"}
    ]
    assert "ids.1 is int32 in Core ML (int64 in ONNX)." in package.notes
    assert package.quantized_weights == 1  # the 100x300 table


def _tensor_types(package: Path) -> set[str]:
    """Element types of the ML program's const ops (its weights), e.g. {'fp32'}."""
    from coremltools.proto import MIL_pb2

    spec = coreml.read_spec(package)
    found = set()
    for function in spec.mlProgram.functions.values():
        for block in function.block_specializations.values():
            for op in block.operations:
                if op.type == "const":
                    for output in op.outputs:
                        dtype = output.type.tensorType.dataType
                        found.add(MIL_pb2.DataType.Name(dtype).lower().replace("float", "fp"))
    return found


def _weights_bytes(package: Path) -> int:
    return sum(p.stat().st_size for p in package.rglob("weights/*"))
