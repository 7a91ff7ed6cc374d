"""Dynamic batching on a real model: throughput against its ceiling and against no batching,
the batcher's own cost, and how well the simulator predicts what the runtime does.

Model: all-MiniLM-L6-v2 (FP32, bench/minilm.py), one sentence of `--tokens` tokens per request,
on ONNX Runtime CPU with the runtime's default threads, one instance.

1. Saturation: a closed loop of 2 x b* clients against the Pipeline with max batch b*, the
   batch size at which the profile (measured in the same run, up to `--max-batch`) peaks;
   its throughput against that ceiling max_b b / latency(b). Target >= 90 %.
2. No batching: the same closed loop with max batch 1; the ratio batching / none.
3. Overhead: a closed loop of one client through a Pipeline whose runner returns its input
   (no model), against calling that runner directly; microseconds per request.
4. Prediction: a grid of settings x arrival processes (Poisson at 50 % and 80 % of the setting's
   capacity, and a closed loop of 2 x max_batch clients); simulated vs measured throughput and
   p99; the error is |predicted - measured| / measured. Target <= 15 %. Each setting is profiled
   afresh just before its runs (the machine's load drifts), and the simulation replays the send
   times the load generator achieved (closed loop: the same clients and request count), with the
   batcher overhead measured in (3) added to each simulated batch.

Run: .venv/bin/python bench/batching.py [--seconds 12] [--tokens 32] [--max-batch 8]
     .venv/bin/python bench/batching.py --model resnet50.onnx   (any model with a batch dim;
                                         --tokens then does not apply)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from core.batching.loadgen import run_load  # noqa: E402
from core.batching.pipeline import Pipeline  # noqa: E402
from core.batching.profile import measure_profile  # noqa: E402
from core.batching.settings import BatchingSettings  # noqa: E402
from core.batching.simulate import simulate  # noqa: E402
from core.batching.verify import measure_load  # noqa: E402
from core.environment import fingerprint  # noqa: E402

MODEL = REPO / "data" / "bench-models" / "minilm-fp32.onnx"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0, help="length of each load run")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--out", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--model", type=Path, help="another .onnx model instead of MiniLM")
    args = parser.parse_args()
    model = args.model or _model()
    names = ("input_ids", "attention_mask", "token_type_ids")
    shapes = {} if args.model else {name: [1, args.tokens] for name in names}
    print(f"model {model.name}, shapes {shapes or 'as declared'}, {os.cpu_count()} CPUs")
    started = time.time()
    profile = measure_profile(model, max_batch_size=args.max_batch, shapes=shapes, min_seconds=2.0)
    print(
        "profile (batch: mean ms):",
        dict(zip(profile.batch_sizes, _r(profile.mean_ms), strict=True)),
    )
    figures = {"profile": profile.model_dump(exclude={"environment"})}
    figures["saturation"] = _saturation(model, profile, shapes, args)
    figures["overhead"] = _overhead(args.seconds)
    overhead_ms = figures["overhead"]["max_batch_1"]["overhead_us"] / 1000
    figures["prediction"] = _prediction(model, shapes, args, overhead_ms)
    figures["load_average"] = _load_average()
    figures["environment"] = fingerprint()
    figures["wall_seconds"] = round(time.time() - started)
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2, default=str))


def _model() -> Path:
    if not MODEL.exists():
        from minilm import export_minilm  # type: ignore[import-not-found]

        export_minilm(MODEL.parent)
    return MODEL


def _saturation(model: Path, profile, shapes, args) -> dict:
    ceiling, best = profile.ceiling(args.max_batch)
    clients = 2 * best
    batched = BatchingSettings(max_batch_size=best, timeout_ms=5)
    single = BatchingSettings(max_batch_size=1, timeout_ms=0)
    runs = {}
    for name, settings in (("batching", batched), ("no_batching", single)):
        run = measure_load(
            model, settings, rate=None, process="closed", clients=clients,
            seconds=args.seconds, shapes=shapes,
        )  # fmt: skip
        runs[name] = run.result
    result = {
        "ceiling_rps": ceiling,
        "ceiling_batch": best,
        "batching_rps": runs["batching"].throughput,
        "batching_mean_batch": runs["batching"].mean_batch_size,
        "no_batching_rps": runs["no_batching"].throughput,
        "share_of_ceiling": runs["batching"].throughput / ceiling,
        "speedup_vs_no_batching": runs["batching"].throughput / runs["no_batching"].throughput,
    }
    print(
        f"(1) saturation with batching: {result['batching_rps']:.1f} req/s "
        f"(mean batch {result['batching_mean_batch']:.2f}) = {result['share_of_ceiling']:.1%} "
        f"of the ceiling {ceiling:.1f} req/s at batch {best} (target >= 90 %)"
    )
    print(
        f"(2) no batching: {result['no_batching_rps']:.1f} req/s; batching / none = "
        f"{result['speedup_vs_no_batching']:.2f}x"
    )
    return result


def _overhead(seconds: float) -> dict:
    feeds = {"x": np.zeros((1, 16), dtype=np.float32)}

    def echo(batch: dict[str, np.ndarray]) -> list[np.ndarray]:
        return [batch["x"]]

    from core.model_info import TensorSpec

    spec = [TensorSpec(name="x", dtype="float32", shape=["batch", 16])]
    direct = _direct_us(echo, feeds, seconds / 4)
    results = {}
    for label, settings in (
        ("max_batch_1", BatchingSettings(max_batch_size=1, timeout_ms=0)),
        (
            "max_batch_8_eager_1",
            BatchingSettings(max_batch_size=8, timeout_ms=5, eager_threshold=1),
        ),
    ):
        with Pipeline([echo], spec, settings) as pipe:
            run = run_load(pipe, [feeds], process="closed", clients=1, seconds=seconds / 4)
        through = 1e6 / run.result.throughput
        results[label] = {"per_request_us": through, "overhead_us": through - direct}
    results["direct_us"] = direct
    for label in ("max_batch_1", "max_batch_8_eager_1"):
        print(
            f"(3) batcher overhead ({label}): {results[label]['overhead_us']:.0f} us per request "
            f"({results[label]['per_request_us']:.0f} us through the pipeline vs {direct:.1f} us "
            "calling the runner directly; one client, no model)"
        )
    return results


def _direct_us(runner, feeds, seconds: float) -> float:
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        runner(feeds)
        count += 1
    return (time.perf_counter() - start) / count * 1e6


def _prediction(model: Path, shapes, args, overhead_ms: float) -> list[dict]:
    grid = [
        BatchingSettings(max_batch_size=1, timeout_ms=0),
        BatchingSettings(max_batch_size=4, timeout_ms=2),
        BatchingSettings(max_batch_size=args.max_batch, timeout_ms=5),
        BatchingSettings(max_batch_size=args.max_batch, timeout_ms=10, eager_threshold=6),
    ]
    rows = []
    print("(4) simulator vs measurement")
    print(f"{'setting':<22}{'load':<14}{'pred rps':>9}{'meas rps':>9}{'err':>7}"
          f"{'pred p99':>10}{'meas p99':>10}{'err':>7}")  # fmt: skip
    for settings in grid:
        fresh = measure_profile(
            model, max_batch_size=settings.max_batch_size, shapes=shapes, min_seconds=1.5
        )
        capacity = fresh.ceiling(settings.max_batch_size)[0]
        for load in ("poisson 50%", "poisson 80%", "closed"):
            rows.append(_compare(model, fresh, shapes, settings, load, capacity, args, overhead_ms))
    _print_errors(rows)
    return rows


def _compare(model, profile, shapes, settings, load, capacity, args, overhead_ms) -> dict:
    clients = 2 * args.max_batch
    if load == "closed":
        kwargs = {"process": "closed", "clients": clients, "rate": None}
    else:
        kwargs = {"process": "poisson", "rate": capacity * int(load[-3:-1]) / 100}
    run = measure_load(model, settings, seconds=args.seconds, shapes=shapes, **kwargs)
    measured = run.result
    if load == "closed":
        predicted = simulate(
            profile, settings, requests=measured.completed, overhead_ms=overhead_ms, **kwargs
        )
    else:  # replay the send times the load generator really achieved
        sent = [ms / 1000 for ms in run.sent_ms]
        predicted = simulate(profile, settings, arrivals=sent, overhead_ms=overhead_ms, **kwargs)
    row = {
        "settings": settings.model_dump(
            include={"max_batch_size", "timeout_ms", "eager_threshold"}
        ),
        "load": load,
        "predicted": predicted.model_dump(exclude={"batch_histogram"}),
        "measured": measured.model_dump(exclude={"batch_histogram"}),
        "throughput_error": abs(predicted.throughput - measured.throughput) / measured.throughput,
        "p99_error": abs(predicted.p99_ms - measured.p99_ms) / measured.p99_ms,
    }
    label = f"b{settings.max_batch_size} t{settings.timeout_ms:g}" + (
        f" e{settings.eager_threshold}" if settings.eager_threshold else ""
    )
    print(
        f"{label:<22}{load:<14}{predicted.throughput:>9.1f}{measured.throughput:>9.1f}"
        f"{row['throughput_error']:>7.1%}{predicted.p99_ms:>10.1f}{measured.p99_ms:>10.1f}"
        f"{row['p99_error']:>7.1%}"
    )
    return row


def _print_errors(rows: list[dict]) -> None:
    for key in ("throughput_error", "p99_error"):
        errors = [row[key] for row in rows]
        within = sum(error <= 0.15 for error in errors)
        print(
            f"    {key.replace('_', ' ')}: median {statistics.median(errors):.1%}, "
            f"max {max(errors):.1%}, {within}/{len(errors)} within 15 %"
        )


def _load_average() -> list[float]:
    return list(os.getloadavg())


def _r(values: list[float]) -> list[float]:
    return [round(value, 2) for value in values]


if __name__ == "__main__":
    main()
