"""Routing jobs to the queue of a live worker that offers their target."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from optistudio.core.errors import NoWorkerForTarget
from optistudio.db.models import WorkerRecord
from optistudio.db.queries import record_worker, stop_worker
from optistudio.db.session import transaction
from optistudio.studio.routing import route
from optistudio.studio.worker_services import worker_rows


def inventory(*available: str, unavailable: dict[str, str] | None = None) -> dict:
    entries = {
        name: {
            "available": True,
            "reason": "",
            "devices": ["cpu"],
            "precisions": ["fp32"],
            "versions": {},
        }
        for name in available
    }
    for name, reason in (unavailable or {}).items():
        entries[name] = {
            "available": False,
            "reason": reason,
            "devices": [],
            "precisions": ["fp16"],
            "versions": {},
        }
    return {"backends": entries, "cpu": {"model": "Test CPU", "isa_flags": ["avx2"]}}


@pytest.fixture
def two_workers(db_factory):
    with transaction(db_factory) as s:
        record_worker(s, hostname="cpu@a", queues=["cpu"], inventory=inventory("onnxruntime"))
        record_worker(
            s,
            hostname="vino@b",
            queues=["vino"],
            inventory=inventory("openvino", unavailable={"tensorrt": "no CUDA device"}),
        )
    return db_factory


@pytest.mark.parametrize(
    ("backend", "queue"),
    [("onnxruntime", "cpu"), ("openvino", "vino")],
    ids=["ort-to-cpu", "openvino-to-vino"],
)
def test_a_target_goes_to_the_worker_that_offers_it(two_workers, backend, queue) -> None:
    assert route(two_workers, backend=backend, device="cpu", max_age_s=30) == queue


def test_an_unserved_target_is_refused_naming_the_workers(two_workers) -> None:
    with pytest.raises(NoWorkerForTarget) as refused:
        route(two_workers, backend="tensorrt", device="cuda:0", max_age_s=30)

    message = refused.value.message
    assert "No live worker offers tensorrt on cuda:0" in message
    assert "cpu@a: onnxruntime (cpu)" in message and "vino@b: openvino (cpu)" in message


def test_no_worker_at_all_says_how_to_start_one(db_factory) -> None:
    with pytest.raises(NoWorkerForTarget, match="No worker is running") as refused:
        route(db_factory, backend="onnxruntime", device="cpu", max_age_s=30)
    assert "make up" in refused.value.hint


def test_stale_and_stopped_workers_do_not_count(two_workers) -> None:
    with transaction(two_workers) as s:
        s.query(WorkerRecord).filter_by(hostname="cpu@a").update(
            {"heartbeat_at": datetime.now(UTC) - timedelta(seconds=120)}
        )
        stop_worker(s, hostname="vino@b")

    with pytest.raises(NoWorkerForTarget, match="No worker is running"):
        route(two_workers, backend="onnxruntime", device="cpu", max_age_s=30)
    states = {row["worker"]: row["state"] for row in worker_rows(two_workers, max_age_s=30)}
    assert states == {"cpu@a": "stale", "vino@b": "stopped"}


def test_worker_rows_show_why_a_backend_is_missing(two_workers) -> None:
    rows = {row["worker"]: row for row in worker_rows(two_workers, max_age_s=30)}

    assert rows["vino@b"]["unavailable"] == "tensorrt: no CUDA device"
    assert rows["cpu@a"]["state"] == "live"


def test_worker_rows_say_each_workers_int8_mode(db_factory) -> None:
    vnni = inventory("onnxruntime")
    vnni["cpu"]["isa_flags"] = ["avx2", "avx512f", "avx512_vnni"]
    with transaction(db_factory) as s:
        record_worker(s, hostname="old@a", queues=["cpu"], inventory=inventory("onnxruntime"))
        record_worker(s, hostname="new@b", queues=["cpu"], inventory=vnni)

    rows = {row["worker"]: row["int8"] for row in worker_rows(db_factory, max_age_s=30)}

    assert rows == {"old@a": "7-bit weights (no VNNI/AMX)", "new@b": "8-bit weights (AVX512-VNNI)"}


def _trainer(device: str | None) -> dict:
    return inventory("onnxruntime") | {"training": {"torch": "2.13.0", "device": device}}


def _route_optimize(factory, spec) -> str:  # type: ignore[no-untyped-def]
    """Where an optimize job with `spec` goes, ranked by its kind's rule (as the studio does)."""
    from optistudio.services.jobkinds import OPTIMIZE

    return route(
        factory,
        backend="onnxruntime",
        device="cpu",
        max_age_s=30,
        suits=lambda found: OPTIMIZE.suits(spec, found),
    )


@pytest.mark.parametrize(
    ("recipes", "train", "queue"),
    [
        (["qat"], None, "gpu"),
        (["auto"], "x.npz", "gpu"),
        (["auto"], None, None),
        (["int8_static"], "x.npz", None),
    ],
    ids=["qat-to-gpu", "auto-with-training-data-to-gpu", "auto-without-data", "ptq-only"],
)
def test_a_run_that_may_train_goes_to_the_worker_training_on_a_gpu(
    db_factory, recipes, train, queue
) -> None:
    from optistudio.services.jobkinds import OptimizeJobSpec

    with transaction(db_factory) as s:
        record_worker(s, hostname="plain@a", queues=["plain"], inventory=inventory("onnxruntime"))
        record_worker(s, hostname="torch@b", queues=["torchcpu"], inventory=_trainer("cpu"))
        record_worker(s, hostname="gpu@c", queues=["gpu"], inventory=_trainer("cuda"))
    settings = {"qat": {"train_path": train}} if train else {}
    spec = OptimizeJobSpec(recipes=recipes, pass_settings=settings)

    chosen = _route_optimize(db_factory, spec)

    unranked = route(db_factory, backend="onnxruntime", device="cpu", max_age_s=30)
    assert chosen == (queue or unranked)  # None: no preference, the usual first worker


def test_without_a_gpu_a_qat_run_prefers_a_worker_with_torch(db_factory) -> None:
    from optistudio.services.jobkinds import OptimizeJobSpec

    with transaction(db_factory) as s:
        record_worker(s, hostname="plain@a", queues=["plain"], inventory=inventory("onnxruntime"))
        record_worker(s, hostname="torch@b", queues=["torchcpu"], inventory=_trainer("cpu"))
    spec = OptimizeJobSpec(recipes=["qat"])

    chosen = _route_optimize(db_factory, spec)

    assert chosen == "torchcpu"


def test_the_page_says_where_qat_trains_or_how_to_enable_it(db_factory) -> None:
    from optistudio.studio.routing import qat_places

    assert "No worker is running" in qat_places(db_factory, max_age_s=30)
    with transaction(db_factory) as s:
        record_worker(s, hostname="plain@a", queues=["plain"], inventory=inventory("onnxruntime"))
    assert "pip install 'optistudio[qat]'" in qat_places(db_factory, max_age_s=30)
    with transaction(db_factory) as s:
        record_worker(s, hostname="torch@b", queues=["t"], inventory=_trainer("cpu"))
        record_worker(s, hostname="gpu@c", queues=["g"], inventory=_trainer("cuda"))

    sentence = qat_places(db_factory, max_age_s=30)

    assert sentence == (
        "QAT trains on gpu@c (CUDA, torch 2.13.0), torch@b (CPU, torch 2.13.0) "
        "(the first is preferred)."
    )
