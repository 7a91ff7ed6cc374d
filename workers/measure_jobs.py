"""The benchmark and compare jobs: figures of the job's model, and of it against another."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from optistudio.core.backends.base import SessionOptions
from optistudio.core.errors import InvalidSpec
from optistudio.core.llm.card import read_card
from optistudio.core.llm.folder import is_decoder_file
from optistudio.core.llm.serving import DecoderBenchReport, benchmark_decoder, settings_for
from optistudio.core.measure.benchmark import BenchmarkReport, BenchmarkSpec, run_benchmark
from optistudio.core.measure.compare import compare_models, describe
from optistudio.db.models import Job, Model
from optistudio.db.queries import MeasurementRow, get_model
from optistudio.db.session import rerun_if_lost
from optistudio.services.jobkinds import BENCHMARK, CompareJobSpec
from optistudio.services.jobresults import BenchmarkJobResult, BenchmarkTarget, CompareJobResult
from optistudio.workers.artifacts import model_of, stored_file
from optistudio.workers.jobs import JobContext
from optistudio.workers.outcome import Done, store


def benchmark_job(job: Job, spec: BenchmarkSpec, context: JobContext) -> Done[BenchmarkJobResult]:
    """Benchmark the job's model as its spec says: one measurement row per metric."""
    model_path, info = model_of(job)
    if is_decoder_file(model_path):
        return decoder_benchmark(model_path, spec, context)
    report = run_benchmark(model_path, spec, info=info, progress=context.progress)
    return benchmark_done(report)


def decoder_benchmark(
    model_path: Path, spec: BenchmarkSpec, context: JobContext
) -> Done[BenchmarkJobResult]:
    """A decoder timed as `bench` times one (optistudio.core.llm.serving): TTFT at the prompt
    lengths that fit its context and greedy decoding at the spec's batch sizes (1 and 4 when
    unset), stored as the result's `decoder` report rather than measurement rows."""
    if spec.precision != "fp32":
        raise InvalidSpec(
            f"A decoder is benchmarked as it is stored, not converted to {spec.precision}.",
            hint="Make a weight-only INT8 or INT4 variant on the Optimize page and benchmark it.",
        )
    card = read_card(model_path)
    context.progress(0.05, "Timing prefill and decoding")
    report = benchmark_decoder(
        model_path,
        backend=spec.backend,
        settings=settings_for(card, batches=spec.batch_sizes),
        options=SessionOptions(threads=spec.threads, device=spec.device),
        card=card,
    )
    target = BenchmarkTarget(backend=spec.backend, device=spec.device, precision=spec.precision)
    return Done(
        message=decoder_summary(report),
        result=BenchmarkJobResult(target=target, decoder=report),
        environment=report.environment,
    )


def benchmark_done(report: BenchmarkReport) -> Done[BenchmarkJobResult]:
    """A benchmark report as a job stores it (rows replace those of an earlier attempt)."""
    result = BenchmarkJobResult(
        target=BenchmarkTarget(
            backend=report.spec.backend,
            device=report.spec.device,
            precision=report.spec.precision,
            execution_provider=report.spec.execution_provider,
        ),
        output_check=report.output_check,
        runtime=json.loads(json.dumps(report.runtime_details, default=str)),
        warnings=report.warnings,
    )
    return Done(
        message=benchmark_summary(report),
        result=result,
        environment=report.environment,
        measurements=[MeasurementRow(*row) for row in report.measurement_rows()],
    )


def decoder_summary(report: DecoderBenchReport) -> str:
    """One line: tokens/s at each batch and TTFT at each prompt length."""
    decode = ", ".join(f"{d.tokens_per_s:.1f} tokens/s at batch {d.batch}" for d in report.decode)
    ttft = ", ".join(f"{p.ttft_ms:.2f} ms at {p.prompt_tokens}" for p in report.prefill)
    return f"Decoded {decode}; time to first token {ttft} prompt tokens."


def record_benchmark(
    factory: sessionmaker[Session], job_id: int, report: BenchmarkReport
) -> tuple[str, int | None]:
    """Store a report on its job exactly as the benchmark job does (`bench --save`, tests);
    returns the job's message and environment id."""
    done = benchmark_done(report)
    return done.message, store(factory, job_id, BENCHMARK, done)


def benchmark_summary(report: BenchmarkReport) -> str:
    """One line: the batch sizes measured, and what made any of them doubtful."""
    batches = ", ".join(str(r.batch_size) for r in report.results)
    unstable = [str(r.batch_size) for r in report.results if not r.stable]
    contended = [str(r.batch_size) for r in report.results if r.contention.contended]
    note = f" Unstable at batch {', '.join(unstable)}." if unstable else ""
    if contended:
        note += f" Other processes competed for the CPU at batch {', '.join(contended)}."
    check = report.output_check
    if check is not None and not check.passed:
        note += f" Outputs disagree with the reference: {'; '.join(check.problems)}."
    return f"Measured batch sizes {batches}.{note}"


def compare_job(job: Job, spec: CompareJobSpec, context: JobContext) -> Done[CompareJobResult]:
    """Compare the job's model (A) with its candidate (B), interleaved: the ratio B/A."""
    path_a, info_a = model_of(job)
    candidate = rerun_if_lost(
        context.factory, lambda s: get_model(s, model_id=spec.candidate_model_id)
    )
    if candidate is None:
        raise InvalidSpec(f"Model #{spec.candidate_model_id} (B) does not exist any more.")
    path_b, info_b = stored_file(candidate)
    comparison = compare_models(
        path_a,
        path_b,
        spec.comparison(),
        info_a=info_a,
        info_b=info_b,
        progress=context.progress,
    )
    sentence = describe(comparison.interval(), a=_label(job.model), b=_label(candidate))
    result = CompareJobResult.model_validate(
        comparison.model_dump()
        | {
            "sentence": sentence,
            "candidate_model_id": candidate.id,
            "candidate_name": candidate.name,
        }
    )
    return Done(message=sentence, result=result, environment=comparison.environment)


def _label(model: Model | None) -> str:
    return f"#{model.id} {model.name}" if model else "A"
