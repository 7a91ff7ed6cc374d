"""RunTarget: where a model runs, as one value that makes the runtime's SessionOptions; the
specs that run a model store its fields flat and read them back as one."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from optistudio.core.backends.base import SessionOptions
from optistudio.core.backends.target import RunsOnTarget, RunTarget
from optistudio.core.diagnose.diagnostics import DiagnosticsSpec
from optistudio.core.diagnose.operator_profile import OperatorProfileSpec
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.core.measure.compare import ComparisonSpec
from optistudio.core.measure.soak import SoakSpec
from optistudio.core.measure.stages import PipelineSpec


def test_session_options_carry_every_field_but_the_backend() -> None:
    target = RunTarget(
        backend="openvino",
        device="CPU",
        precision="bf16",
        threads=3,
        spin_wait=False,
        execution_provider="dnnl",
        io_binding=True,
    )

    options = target.session_options()

    assert options == SessionOptions(
        device="cpu",
        threads=3,
        spin_wait=False,
        precision="bf16",
        execution_provider="dnnl",
        io_binding=True,
    )


def test_default_target_is_the_default_session() -> None:
    assert RunTarget().session_options() == SessionOptions()
    assert RunTarget().backend == "onnxruntime"


@pytest.mark.parametrize(
    "bad",
    [{"thread": 2}, {"threads": 0}, {"backend": ""}, {"precision": "int4"}],
    ids=["misspelt", "no-threads", "no-backend", "unknown-precision"],
)
def test_a_bad_target_names_its_field(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as raised:
        RunTarget(**bad)

    assert next(iter(bad)) in str(raised.value)


def test_every_field_has_a_description_for_the_forms() -> None:
    undescribed = [n for n, f in RunTarget.model_fields.items() if not f.description]

    assert undescribed == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            BenchmarkSpec(backend="openvino", precision="bf16", threads=2, io_binding=True),
            RunTarget(backend="openvino", precision="bf16", threads=2, io_binding=True),
        ),
        (SoakSpec(device="cuda:0", threads=4), RunTarget(device="cuda:0", threads=4)),
        (PipelineSpec(backend="openvino", threads=1), RunTarget(backend="openvino", threads=1)),
        (
            ComparisonSpec(precision="fp16", threads=2),
            RunTarget(precision="fp16", threads=2, spin_wait=False),
        ),
        (OperatorProfileSpec(threads=2), RunTarget(threads=2, spin_wait=False)),
        (DiagnosticsSpec(backend="openvino"), RunTarget(backend="openvino", spin_wait=False)),
    ],
    ids=["benchmark", "soak", "pipeline", "comparison-pins-no-spin", "operator-profile", "diag"],
)
def test_a_spec_reads_its_fields_as_one_target(spec: RunsOnTarget, expected: RunTarget) -> None:
    assert spec.run_target == expected


def test_a_spec_shares_the_targets_field_help() -> None:
    for spec in (BenchmarkSpec, SoakSpec, ComparisonSpec):
        assert (
            spec.model_fields["threads"].description
            == RunTarget.model_fields["threads"].description
        )


def test_a_benchmark_spec_dumps_flat_as_it_always_did() -> None:
    """The stored JSON of a spec keeps its keys and their order: old rows load, new rows match."""
    stored = {
        "shapes": {},
        "dims": {},
        "values": {},
        "inputs_file": None,
        "batch_axes": {},
        "backend": "openvino",
        "device": "cpu",
        "precision": "bf16",
        "execution_provider": None,
        "io_binding": False,
        "check_outputs": True,
        "batch_sizes": [1, 8],
        "threads": 2,
        "cpu_affinity": None,
        "warmup_runs": 5,
        "min_runs": 30,
        "min_seconds": 2.0,
        "max_seconds": 20.0,
        "window_seconds": 0.5,
        "stability_windows": 3,
        "stability_tolerance": 0.1,
        "seed": 0,
    }

    spec = BenchmarkSpec.model_validate(stored)
    dumped = spec.model_dump(mode="json")

    assert list(dumped.items()) == list(stored.items())
    assert "run_target" not in BenchmarkSpec.model_json_schema()["properties"]
