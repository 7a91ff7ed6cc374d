"""The batching policy's settings, validated once and shared by the runtime, simulator and UI."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from optistudio.core.backends import SessionOptions
from optistudio.core.backends.target import RunTarget
from optistudio.core.errors import InvalidSpec, describe_validation_error
from optistudio.core.machine.affinity import available_cores

DEFAULT_MAX_BATCH_SIZE = 8
"""The max batch size wherever none is given: the largest batch a latency profile times (the
Batching page's "Largest batch", the CLI's --max-batch-size) and the batch a server caps at."""


class BatchingSettings(BaseModel):
    """How requests are grouped into batches and spread over model instances."""

    model_config = ConfigDict(extra="forbid")

    max_batch_size: int = Field(
        default=DEFAULT_MAX_BATCH_SIZE,
        ge=1,
        le=1024,
        description="Most requests (rows) in one batch.",
    )
    timeout_ms: float = Field(
        default=2.0,
        ge=0,
        le=10_000,
        description="Longest the oldest queued request waits for batch mates before its batch "
        "is sent anyway (Triton's max_queue_delay).",
    )
    eager_threshold: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="Send a batch at once when this many requests are queued, without waiting "
        "for the timeout. Empty: off.",
    )
    preferred_batch_sizes: list[int] = Field(
        default_factory=list,
        description="Batch sizes sent as soon as they can be formed; the largest that fits is "
        "preferred when a batch is cut.",
    )
    instances: int = Field(default=1, ge=1, le=64, description="Model instances (sessions).")
    max_queue: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="Most requests waiting at once; a full queue rejects new ones at once.",
    )
    memory_pool_ratio: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Share of device memory each instance's session may pool. Empty: default.",
    )

    @model_validator(mode="after")
    def _preferred_fit(self) -> BatchingSettings:
        bad = [size for size in self.preferred_batch_sizes if not 1 <= size <= self.max_batch_size]
        if bad:
            raise ValueError(
                f"preferred batch sizes {bad} must lie in 1..max_batch_size ({self.max_batch_size})"
            )
        self.preferred_batch_sizes = sorted(set(self.preferred_batch_sizes))
        return self

    @property
    def timeout_s(self) -> float:
        return self.timeout_ms / 1000.0

    def dispatch_threshold(self) -> int:
        """Queue length at which a batch leaves without waiting for the timeout."""
        thresholds = [self.max_batch_size]
        if self.eager_threshold is not None:
            thresholds.append(self.eager_threshold)
        thresholds.extend(self.preferred_batch_sizes)
        return min(thresholds)

    def cut_size(self, queued: int) -> int:
        """Rows to take when a batch is sent with `queued` requests waiting."""
        fit = min(queued, self.max_batch_size)
        preferred = [size for size in self.preferred_batch_sizes if size <= fit]
        return preferred[-1] if preferred else fit


def settings_from(values: dict[str, object]) -> BatchingSettings:
    """Settings from untrusted values, with an InvalidSpec naming each bad field."""
    try:
        return BatchingSettings.model_validate(values)
    except ValidationError as exc:
        raise InvalidSpec(
            f"Batching settings out of range: {describe_validation_error(exc)}",
            hint="See the help of each setting for its allowed range.",
        ) from None


def serving_threads(instances: int = 1) -> int:
    """Intra-op threads per instance behind the Pipeline when none are set: the cores this
    process may use but one, shared out between the instances (at least one each).

    The spare core is for the serving threads (callers, dispatcher, result hand-back). Left
    without one, the runtime's threads are preempted by them mid-batch and the model's speed
    under load becomes erratic: on 2 cores with both threads, MiniLM ran 0.94-1.20x its profiled
    speed from run to run and the tuner's picks kept their p99 budget when served in 2 of 6
    cases; with one thread, 0.88-1.11x and 6 of 6 (docs/BENCHMARKS.md). The price is peak
    throughput on few cores (1 of 2 cores there: about 135 against 190-240 req/s); on 16 cores
    it is a sixteenth. Set the threads to use every core.
    """
    return max(1, (len(available_cores()) - 1) // max(1, instances))


def serving_options() -> SessionOptions:
    """Session options for a model behind the Pipeline when none are given: the runtime's idle
    threads do not spin, and the threads are left for `with_serving_threads` to set (the Pipeline
    and the profile both apply it, so it is decided in one place). Behind the Pipeline the
    serving threads share the cores with the runtime's, and threads spinning between batches
    take the cores they need: on 2 cores MiniLM's speed under load then moved 0.5x-2.3x of its
    profile from run to run in one bench run, 0.94x-1.2x without spinning (docs/BENCHMARKS.md).
    Profiles are timed with the same options, so they describe the model as it will be served."""
    return SessionOptions(spin_wait=False)


def serving_target(target: RunTarget | None) -> tuple[str, SessionOptions]:
    """The backend and session options a model behind the Pipeline is loaded with: `target`'s
    (`RunTarget.session_options`), or ONNX Runtime with `serving_options()` when none is
    given."""
    if target is None:
        return "onnxruntime", serving_options()
    return target.backend, target.session_options()


def with_serving_threads(options: SessionOptions, instances: int = 1) -> SessionOptions:
    """`options` with `serving_threads(instances)` when they set no threads."""
    if options.threads is not None:
        return options
    return options.model_copy(update={"threads": serving_threads(instances)})
