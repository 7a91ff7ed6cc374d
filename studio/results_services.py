"""Finished measurements as the pages read them: the Results page's frame, table and side by
side view with each run's verdict, and the finished A/B comparisons."""

from __future__ import annotations

from typing import Any

import pandas as pd
from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.llm.serving import DecoderBenchReport
from optistudio.core.metrics import METRICS
from optistudio.core.numerics.tolerances import REFERENCE, RULES
from optistudio.core.report.labels import threads_text
from optistudio.db.models import Job, JobKind
from optistudio.db.queries import finished_comparisons, job_results, results_rows
from optistudio.db.session import transaction
from optistudio.services.jobkinds import BENCHMARK, COMPARE
from optistudio.services.jobresults import BenchmarkJobResult, CompareJobResult
from optistudio.studio.decoder_rows import MB, DecoderBench, bench_rows
from optistudio.studio.jobs_services import finished_of, job_view

RESULT_KEYS = ["job_id", "model_id", "model_name", "backend", "batch_size", "threads"]


def results_frame(factory: sessionmaker[Session], *, model_id: int | None = None) -> pd.DataFrame:
    """One row per (job, backend, batch size, threads) with a column per metric."""
    with transaction(factory) as s:
        rows = results_rows(s, model_id=model_id)
    if not rows:
        return pd.DataFrame(columns=[*RESULT_KEYS, "p50_ms", "p99_ms", "throughput"])
    long = pd.DataFrame(rows)
    wide = long.pivot_table(index=[*RESULT_KEYS, "finished_at"], columns="metric", values="value")
    wide = wide.reset_index().sort_values(["job_id", "batch_size"], ascending=[False, True])
    wide.columns.name = None
    with transaction(factory) as s:
        jobs = job_results(s, job_ids=[int(i) for i in wide["job_id"].unique()])
    targets = {job_id: _target_of(spec, result) for job_id, (spec, result) in jobs.items()}
    for column in ("device", "precision", "outputs"):
        wide[column] = [targets.get(int(j), {}).get(column, "") for j in wide["job_id"]]
    return wide


def _target_of(spec: dict[str, Any], result: dict[str, Any]) -> dict[str, str]:
    """Device, precision and the output check's verdict of a benchmark job."""
    stored = BENCHMARK.read_result(result)
    target = stored.target if stored is not None else BENCHMARK.parse_spec(spec)
    return {"device": target.device, "precision": target.precision, "outputs": _outputs(stored)}


def _outputs(result: BenchmarkJobResult | None) -> str:
    """The output check's verdict naming the tolerance rule that judged it, in the words bench
    prints (`OutputCheck.verdict`: 'agree within the BF16 rule: ...', 'DISAGREE (the FP32
    rule: ...): ...'); 'reference' for the reference itself, 'not checked' when none ran."""
    if result is None or "output_check" not in result.model_fields_set:
        return "not checked"
    check = result.output_check
    return "reference" if check is None else check.verdict()


def tolerance_note() -> str:
    """Under the side-by-side table: what each target is checked against and by which rule,
    the floors read from the rules themselves (`optistudio.core.numerics.tolerances`), the
    ones optimize's judge holds its variants to."""
    floors = ", ".join(f"{r.min_snr_db:g} dB {p.upper()}" for p, r in RULES.items())
    return (
        f"Each target's outputs are checked against {REFERENCE} on the same inputs, by the "
        f"rule of its precision: every output's worst-sample SNR at least {floors} (a mixed "
        "precision such as int8+bf16 by its loosest part); NaN or Inf always fails. The "
        "outputs column names the rule that judged each run."
    )


def side_by_side(wide: pd.DataFrame) -> pd.DataFrame:
    """The latest run of each target (backend, device, precision), one row each."""
    if wide.empty:
        return wide
    latest = wide.sort_values("job_id", ascending=False).drop_duplicates(
        ["backend", "device", "precision", "batch_size"]
    )
    rows = []
    for (backend, device, precision), group in latest.groupby(
        ["backend", "device", "precision"], sort=True
    ):
        first = group.sort_values("batch_size").iloc[0]
        best = group.loc[group["throughput"].idxmax()]
        rows.append(
            {
                "target": f"{backend} · {device} · {precision}",
                "job": int(first["job_id"]),
                f"p50 at batch {int(first['batch_size'])} (ms)": round(first["p50_ms"], 3),
                "p99 (ms)": round(first["p99_ms"], 3),
                "best throughput (/s)": round(best["throughput"], 1),
                "at batch": int(best["batch_size"]),
                "outputs vs ORT FP32 CPU": first["outputs"],
            }
        )
    return pd.DataFrame(rows)


def display_table(wide: pd.DataFrame) -> pd.DataFrame:
    """The results table as people read it: units in headers, spread beside p50, a verdict."""
    table = pd.DataFrame(
        {
            "job": wide["job_id"],
            "model": wide["model_name"],
            "backend": wide["backend"],
            "device": wide.get("device", "cpu"),
            "precision": wide.get("precision", "fp32"),
            "batch": wide["batch_size"],
            "threads": wide["threads"],
        }
    )
    table["p50 (ms)"] = [
        f"{p50:.3f} ± {(p90 - p10) / 2:.3f}"
        for p50, p10, p90 in zip(
            wide["p50_ms"],
            wide.get("p10_ms", wide["p50_ms"]),
            wide.get("p90_ms", wide["p50_ms"]),
            strict=True,
        )
    ]
    for metric in ("p90_ms", "p95_ms", "p99_ms", "mean_ms", "throughput", "peak_rss_mb"):
        if metric in wide:
            spec = METRICS[metric]
            label = spec.label.removesuffix(" latency")
            table[f"{label} ({spec.unit})"] = wide[metric].round(3)
    if "samples" in wide:
        table["runs"] = wide["samples"].astype(int)
    verdicts = [verdict(row) for _, row in wide.iterrows()]
    # Beside the target, ahead of the figures: at the far right a wide table hid 'contended'.
    table.insert(table.columns.get_loc("threads") + 1, "verdict", verdicts)
    if "outputs" in wide:
        table["outputs"] = wide["outputs"]
    return table.reset_index(drop=True)


def verdict(row: pd.Series) -> str:
    """'stable', 'unstable', with ', contended' when other processes competed for the CPU."""
    words = ["stable" if row.get("stable", 0.0) >= 0.5 else "unstable"]
    if row.get("contended", 0.0) >= 0.5:
        words.append(f"contended ({row.get('other_cores', 0.0):.1f} cores busy elsewhere)")
    return ", ".join(words)


def decoder_benchmarks(
    factory: sessionmaker[Session], *, model_id: int | None = None, limit: int = 10
) -> list[DecoderBench]:
    """Finished benchmarks of decoders (of `model_id` when given), newest first: what each was
    measured on, and its TTFT per prompt length and decoding per batch size as table rows."""
    with transaction(factory) as s:
        jobs = finished_of(s, kind=JobKind.benchmark, model_id=model_id, limit=limit)
        stored = [(job, BENCHMARK.read_result(job.result)) for job in jobs]
        return [
            _decoder_bench(job, result, result.decoder)
            for job, result in stored
            if result is not None and result.decoder is not None
        ]


def _decoder_bench(
    job: Job, result: BenchmarkJobResult, report: DecoderBenchReport
) -> DecoderBench:
    prefill, decode = bench_rows(report)
    threads = report.environment.get("threads") or "runtime default"
    measured_on = f"{report.backend}, {threads} threads, {report.size_bytes / MB:.2f} MB" + (
        f", peak RSS {report.peak_rss_mb:.0f} MiB" if report.peak_rss_mb is not None else ""
    )
    return DecoderBench(job_view(job, result), measured_on, prefill, decode)


def comparison_rows(factory: sessionmaker[Session], *, limit: int = 50) -> list[dict[str, Any]]:
    """Finished comparisons, newest first, as flat rows for a table and a chart."""
    with transaction(factory) as s:
        stored = [
            (job, COMPARE.read_result(job.result)) for job in finished_comparisons(s, limit=limit)
        ]
        return [_comparison_row(job, result) for job, result in stored if result is not None]


def _comparison_row(job: Job, result: CompareJobResult) -> dict[str, Any]:
    return {
        "job": job.id,
        "A": f"#{job.model_id} {job.model.name if job.model else ''}",
        "B": f"#{result.candidate_model_id} {result.candidate_name}".strip(),
        "runs": comparison_runs(job.spec or {}, result),
        "ratio": result.ratio,
        "low": result.low,
        "high": result.high,
        "verdict": result.verdict,
        "pairs": result.pairs,
        "batch": result.batch_size,
        "sentence": result.sentence,
        "margin": result.margin,
        "contended": bool(result.contention and result.contention.contended),
    }


def comparison_runs(spec: dict[str, Any], result: CompareJobResult) -> str:
    """How both sides ran, in words: 'onnxruntime fp32 · batch 1 · 2 threads', or each side's
    backend and precision where they differ ('A onnxruntime fp32, B openvino bf16 · ...')."""
    backend, precision = spec.get("backend") or "onnxruntime", spec.get("precision") or "fp32"
    a = f"{backend} {precision}"
    b = f"{spec.get('candidate_backend') or backend} {spec.get('candidate_precision') or precision}"
    sides = a if a == b else f"A {a}, B {b}"
    return f"{sides} · batch {result.batch_size} · {threads_text(result.threads)}"
