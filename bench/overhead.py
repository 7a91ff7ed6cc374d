"""How much the studio's engine and job path cost on top of bare ONNX Runtime.

1. Engine overhead: the benchmark engine's p50 against a bare `session.run` loop on the same
   model, same threads, in the same process, interleaved over several rounds. Prints the median
   ratio (engine / bare); the target is <= 1.05.
2. Queue latency: the median time from "Benchmark" (job row committed, task sent) to the worker
   starting the job, through a real Redis and a real Celery worker.

Run: .venv/bin/python bench/overhead.py [--rounds 7] [--jobs 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from optistudio.core.data.inputs import synthesize_inputs  # noqa: E402
from optistudio.core.measure.benchmark import BenchmarkSpec, run_benchmark  # noqa: E402
from optistudio.core.model.intake import inspect_model  # noqa: E402
from optistudio.core.model.samples import build_sample  # noqa: E402

BATCH = 8
THREADS = 1


def bare_p50(path: Path, feeds: dict[str, np.ndarray], runs: int) -> float:
    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    for _ in range(5):
        session.run(None, feeds)
    latencies = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        session.run(None, feeds)
        latencies.append((time.perf_counter_ns() - t0) / 1e6)
    return float(np.median(latencies))


def engine_p50(path: Path, info, runs: int) -> tuple[float, int]:
    spec = BenchmarkSpec(
        batch_sizes=[BATCH],
        threads=THREADS,
        warmup_runs=5,
        min_runs=runs,
        min_seconds=0.0,
        max_seconds=60.0,
        window_seconds=0.2,
    )
    result = run_benchmark(path, spec, info=info).results[0]
    return result.latency["p50_ms"], result.samples


def engine_overhead(path: Path, rounds: int) -> None:
    info = inspect_model(path)
    feeds, _ = synthesize_inputs(info.inputs, batch_size=BATCH)
    ratios = []
    print(f"model {path.name}, batch {BATCH}, {THREADS} thread(s)")
    for index in range(rounds):
        engine, samples = engine_p50(path, info, runs=300)
        bare = bare_p50(path, feeds, runs=samples)
        ratios.append(engine / bare)
        print(
            f"  round {index + 1}: engine p50 {engine:.4f} ms, bare p50 {bare:.4f} ms, "
            f"ratio {engine / bare:.3f} ({samples} runs each)"
        )
    print(
        f"engine/bare p50 ratio: median {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over {rounds} rounds; target <= 1.05"
    )


def queue_latency(model: Path, jobs: int) -> None:
    from optistudio.cli.launcher import Stack, free_port, redis_command, redis_ready, worker_command
    from optistudio.db.queries import get_job
    from optistudio.db.session import make_session_factory, transaction
    from optistudio.services.catalog import add_model_file
    from optistudio.services.migrate import upgrade
    from optistudio.services.settings import Settings
    from optistudio.services.telemetry import telemetry_off_env
    from optistudio.studio.jobs_services import submit_benchmark
    from optistudio.workers.app import create_app

    with tempfile.TemporaryDirectory() as scratch:
        data = Path(scratch) / "data"
        port = free_port()
        settings = Settings(data_dir=data, broker_url=f"redis://127.0.0.1:{port}/0")
        upgrade(settings.database_url, lock_dir=data)
        env = telemetry_off_env()
        env.update(OPTISTUDIO_DATA_DIR=str(data), OPTISTUDIO_BROKER_URL=settings.broker_url)
        env.pop("OPTISTUDIO_DATABASE_URL", None)
        stack = Stack()
        log_path = Path(scratch) / "stack.log"
        log = log_path.open("wb")
        stack.start("redis", redis_command(port, data / "redis"), output=log)
        while not redis_ready(port):
            time.sleep(0.1)
        stack.start("worker", worker_command(settings), env, output=log, cwd=REPO)
        app = create_app(settings)
        try:
            deadline = time.monotonic() + 60
            while not app.control.ping(timeout=0.5):
                if time.monotonic() > deadline:
                    raise SystemExit(f"the worker did not start:\n{log_path.read_text()[-3000:]}")
            factory = make_session_factory(settings.database_url)
            model_id = add_model_file(factory, settings, model, name=model.stem).model_id
            spec = BenchmarkSpec(
                batch_sizes=[1],
                warmup_runs=1,
                min_runs=3,
                min_seconds=0.0,
                max_seconds=1.0,
                window_seconds=0.01,
            )
            delays = []
            for _ in range(jobs):
                submitted = time.time()
                job_id = submit_benchmark(
                    factory,
                    model_id=model_id,
                    spec=spec,
                    send=lambda n, a: app.send_task(n, args=a).id,
                )
                while True:
                    with transaction(factory) as s:
                        job = get_job(s, job_id=job_id)
                        if job.status.value in {"succeeded", "failed", "cancelled"}:
                            break
                    time.sleep(0.02)
                assert job.status.value == "succeeded", job.message
                delays.append(job.started_at.timestamp() - submitted)
            millis = sorted(d * 1000 for d in delays)
            print(
                f"submit -> worker start: median {statistics.median(millis):.1f} ms "
                f"(min {millis[0]:.1f}, max {millis[-1]:.1f}) over {jobs} jobs"
            )
        finally:
            stack.stop()
            log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        model = build_sample("tiny_cnn", Path(scratch))
        engine_overhead(model, args.rounds)
        queue_latency(model, args.jobs)


if __name__ == "__main__":
    main()
