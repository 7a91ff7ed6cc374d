"""The backends a form offers come from the live workers' targets, within the spec's own set."""

from __future__ import annotations

from typing import Any

import pytest

from optistudio.core.batching.specs import BatchingVerifySpec
from optistudio.core.diagnose.operator_profile import OperatorProfileSpec
from optistudio.core.measure.soak import SoakSpec
from optistudio.db.queries import record_worker
from optistudio.db.session import transaction
from optistudio.services.catalog import add_model_file
from optistudio.studio.backend_choices import backend_choices, spec_backends
from tests.studio.conftest import view_page

CPU_WORKER = [
    ("onnxruntime", "cpu", "fp32"),
    ("litert", "cpu", "fp32"),
    ("onnxruntime", "cpu", "int8"),
    ("openvino", "cpu", "bf16"),
    ("openvino", "cpu", "fp32"),
]
GPU_WORKER = [("tensorrt", "cuda", "fp16"), ("onnxruntime", "cuda", "fp32")]


def test_a_closed_set_is_read_from_the_spec() -> None:
    assert spec_backends(OperatorProfileSpec) == ["onnxruntime", "openvino"]
    assert spec_backends(SoakSpec) is None


@pytest.mark.parametrize(
    ("spec", "targets", "expected"),
    [
        (SoakSpec, CPU_WORKER + GPU_WORKER, ["onnxruntime", "litert", "openvino"]),
        (
            SoakSpec,
            [("openvino", "cpu", "fp32"), ("onnxruntime", "cpu", "fp32")],
            ["onnxruntime", "openvino"],
        ),
        (BatchingVerifySpec, [("openvino", "cpu", "fp32")], ["openvino"]),
        (OperatorProfileSpec, CPU_WORKER, ["onnxruntime", "openvino"]),
        (SoakSpec, GPU_WORKER, ["onnxruntime"]),
        (SoakSpec, [], ["onnxruntime"]),
        (OperatorProfileSpec, [], ["onnxruntime", "openvino"]),
    ],
    ids=[
        "live-cpu-only",
        "default-first",
        "one-live",
        "closed-set",
        "no-cpu",
        "none-live",
        "none-closed",
    ],
)
def test_the_form_offers_what_live_workers_run(
    spec: type, targets: list[tuple[str, str, str]], expected: list[str]
) -> None:
    assert backend_choices(targets, spec) == expected


def test_another_device_offers_its_own() -> None:
    assert backend_choices(GPU_WORKER, SoakSpec, device="cuda") == ["onnxruntime", "tensorrt"]


def _live_worker(factory: Any, *backends: str) -> None:
    entry = {"available": True, "reason": "", "devices": ["cpu"], "precisions": ["fp32"]}
    offered = {"backends": {name: dict(entry) for name in backends}}
    with transaction(factory) as s:
        record_worker(s, hostname="w@test", queues=["cpu"], inventory=offered)


def _backend_boxes(model_id: int, page: str) -> dict[str, list[str]]:
    at = view_page(f"optistudio.studio.views.{page}", query={"model": str(model_id)}).run()
    assert not at.exception, at.exception
    return {box.key or "": list(box.options) for box in at.selectbox if box.label == "Backend"}


@pytest.mark.parametrize(
    ("live", "profile", "soak"),
    [
        ((), ["onnxruntime", "openvino"], ["onnxruntime"]),
        (("litert", "onnxruntime"), ["onnxruntime"], ["onnxruntime", "litert"]),
    ],
    ids=["no-worker", "ort-and-litert-live"],
)
def test_the_diagnostics_forms_list_the_live_backends(  # type: ignore[no-untyped-def]
    db_factory, app_settings, make_model, live, profile, soak
) -> None:
    model_id = add_model_file(db_factory, app_settings, make_model(), name="m").model_id
    if live:
        _live_worker(db_factory, *live)

    boxes = _backend_boxes(model_id, "diagnostics")

    assert boxes == {"": profile, "soak_backend": soak}


def test_the_batching_form_lists_the_live_backends(  # type: ignore[no-untyped-def]
    db_factory, app_settings, make_model
) -> None:
    model_id = add_model_file(db_factory, app_settings, make_model(), name="m").model_id
    _live_worker(db_factory, "openvino", "onnxruntime")

    assert list(_backend_boxes(model_id, "batching").values()) == [["onnxruntime", "openvino"]]
