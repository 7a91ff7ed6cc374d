"""Two real workers on different queues offering different backends: routing and inventory."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from optistudio.cli.launcher import Stack, free_port, redis_command, redis_ready, worker_command
from optistudio.core.backends import get_backend
from optistudio.core.errors import NoWorkerForTarget
from optistudio.core.measure.benchmark import BenchmarkSpec
from optistudio.db.queries import get_job
from optistudio.db.session import make_session_factory, transaction
from optistudio.services.catalog import add_model_file
from optistudio.services.migrate import upgrade
from optistudio.services.settings import Settings
from optistudio.services.telemetry import telemetry_off_env
from optistudio.studio.jobs_services import submit_benchmark
from optistudio.studio.routing import route
from optistudio.studio.worker_services import worker_rows
from optistudio.workers.app import create_app

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
QUICK = {
    "batch_sizes": [1],
    "warmup_runs": 1,
    "min_runs": 5,
    "min_seconds": 0.1,
    "max_seconds": 1.0,
    "window_seconds": 0.05,
}


def wait(check, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"{what} did not happen within {timeout} s")


@pytest.fixture
def two_worker_stack(tmp_path: Path):
    if not get_backend("openvino").availability().ok:
        pytest.skip("openvino is not available here")
    port = free_port()
    settings = Settings(data_dir=tmp_path / "data", broker_url=f"redis://127.0.0.1:{port}/0")
    upgrade(settings.database_url, lock_dir=settings.data_dir)
    factory = make_session_factory(settings.database_url)
    stack = Stack()
    log = (tmp_path / "stack.log").open("wb")
    stack.start("redis", redis_command(port, tmp_path / "redis"), output=log)
    wait(lambda: redis_ready(port), "redis")
    for queue, offered in (("cpu", "onnxruntime"), ("vino", "openvino")):
        env = telemetry_off_env() | {
            "OPTISTUDIO_DATA_DIR": str(settings.data_dir),
            "OPTISTUDIO_BROKER_URL": settings.broker_url,
            "OPTISTUDIO_QUEUES": queue,
            "OPTISTUDIO_BACKENDS": offered,
            "OPTISTUDIO_HEARTBEAT_S": "1",
        }
        env.pop("OPTISTUDIO_DATABASE_URL", None)
        worker_settings = settings.model_copy(update={"queues": queue})
        stack.start(f"worker-{queue}", worker_command(worker_settings), env, output=log, cwd=REPO)
    try:
        wait(lambda: len(worker_rows(factory, max_age_s=30)) == 2, "both workers reporting")
        yield settings, factory, stack
    finally:
        stack.stop()
        log.close()


def run_benchmark_on(settings, factory, model_id: int, backend: str) -> object:
    app = create_app(settings)
    queue = route(factory, backend=backend, device="cpu", max_age_s=30)
    spec = BenchmarkSpec(backend=backend, **QUICK)
    job_id = submit_benchmark(
        factory,
        model_id=model_id,
        spec=spec,
        send=lambda name, args: app.send_task(name, args=args, queue=queue).id,
    )

    def finished() -> bool:
        with transaction(factory) as s:
            return get_job(s, job_id=job_id).is_terminal

    wait(finished, f"job {job_id} on {backend}")
    with transaction(factory) as s:
        return get_job(s, job_id=job_id)


def test_jobs_go_to_the_worker_that_has_their_backend(two_worker_stack, tiny_model) -> None:
    settings, factory, _ = two_worker_stack
    model_id = add_model_file(factory, settings, tiny_model, name="tiny").model_id

    on_vino = run_benchmark_on(settings, factory, model_id, "openvino")
    on_ort = run_benchmark_on(settings, factory, model_id, "onnxruntime")

    assert on_vino.status.value == "succeeded", on_vino.message
    assert on_vino.worker.startswith("vino@")
    assert on_ort.status.value == "succeeded", on_ort.message
    assert on_ort.worker.startswith("cpu@")


def test_an_unserved_target_is_refused_at_submit(two_worker_stack) -> None:
    _, factory, _ = two_worker_stack

    with pytest.raises(NoWorkerForTarget, match="No live worker offers tensorrt on cuda"):
        route(factory, backend="tensorrt", device="cuda:0", max_age_s=30)


def test_a_stopped_worker_is_marked_and_no_longer_routed_to(two_worker_stack) -> None:
    settings, factory, stack = two_worker_stack
    name, vino = next((n, p) for n, p in stack.children if n == "worker-vino")
    vino.terminate()
    vino.wait(timeout=30)

    wait(
        lambda: (
            {r["worker"].split("@")[0]: r["state"] for r in worker_rows(factory, max_age_s=30)}.get(
                "vino"
            )
            == "stopped"
        ),
        "the vino worker marked stopped",
    )
    with pytest.raises(NoWorkerForTarget, match="openvino"):
        route(factory, backend="openvino", device="cpu", max_age_s=30)
