"""SQLAlchemy 2.x typed models.

Enums are stored as their string values (VARCHAR, no native enum type, no CHECK constraint), so
adding a member needs no migration. Timestamps are always timezone-aware UTC in Python, also on
SQLite, which keeps no zone.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
    func,
    text,
)
from sqlalchemy import Enum as SAEnum
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class JobStatus(str, Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    timed_out = "timed_out"


TERMINAL = frozenset(
    {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.timed_out}
)


class JobKind(str, Enum):
    """What a job does. A kind once stored under another name reads as today's
    (`FORMER_JOB_KINDS`): rows keep the name they were written with, no migration."""

    benchmark = "benchmark"
    compare = "compare"
    optimize = "optimize"
    operator_profile = "operator_profile"
    soak = "soak"
    latency_profile = "latency_profile"
    batching_verify = "batching_verify"
    export = "export"
    video = "video"

    @classmethod
    def _missing_(cls, value: object) -> JobKind | None:
        renamed = FORMER_JOB_KINDS.get(str(value))
        return cls(renamed) if renamed else None

    def former_names(self) -> tuple[str, ...]:
        """The names rows written before a rename hold for this kind."""
        return tuple(old for old, new in FORMER_JOB_KINDS.items() if new == self.value)

    def stored_names(self) -> tuple[str, ...]:
        """Every name a row of this kind may hold: today's first, then the former ones."""
        return (self.value, *self.former_names())


FORMER_JOB_KINDS: dict[str, str] = {
    "profile": "operator_profile",
    "batching_profile": "latency_profile",
}
"""Former job kind -> today's: the names rows, brokers' queues and old clients still hold."""


class JobKindColumn(TypeDecorator[JobKind]):
    """A job's kind as VARCHAR(32): written as today's value, read from today's or a former
    name. A plain string binds as it is (a query for the rows of a former name)."""

    impl = String(32)
    cache_ok = True

    def process_bind_param(self, value: JobKind | str | None, dialect: Dialect) -> str | None:
        if value is None or isinstance(value, JobKind):
            return None if value is None else value.value
        JobKind(value)  # ValueError for a name that is no kind, as the enum column refused it
        return value

    def process_result_value(self, value: str | None, dialect: Dialect) -> JobKind | None:
        return None if value is None else JobKind(value)


class UtcDateTime(TypeDecorator[datetime]):
    """DateTime(timezone=True) that always hands back aware UTC datetimes (SQLite drops zones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is None:
            return value
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _string_enum(enum_cls: type[Enum], length: int) -> SAEnum:
    """A VARCHAR column holding the members' values (not their names)."""
    return SAEnum(
        enum_cls,
        native_enum=False,
        length=length,
        values_callable=lambda members: [m.value for m in members],
        validate_strings=True,
    )


def _created_at() -> Mapped[datetime]:
    return mapped_column(UtcDateTime(), server_default=func.now())


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, datetime: UtcDateTime()}


class Model(Base):
    """An uploaded (or sample) model artifact, deduplicated by content hash."""

    __tablename__ = "models"
    __table_args__ = (UniqueConstraint("sha256", "backend", "precision"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    """The file's content address. One file is one model, except where a variant runs it on a
    backend at an inference precision of its own (`backend`, `precision`): BF16 on OpenVINO of
    the original's bytes is a model of its own, pointing at the same stored file."""
    name: Mapped[str] = mapped_column(String(255))
    filename: Mapped[str] = mapped_column(String(255))
    path: Mapped[str] = mapped_column(String(1024))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    info: Mapped[dict[str, Any]]
    source: Mapped[str] = mapped_column(String(32), default="upload", server_default="upload")
    parent_id: Mapped[int | None] = mapped_column(
        ForeignKey("models.id", ondelete="RESTRICT"), index=True
    )
    """The original this variant was made from; None for uploads and samples."""
    recipe: Mapped[dict[str, Any] | None]
    """The recipe that produced this variant from its parent (enough to reproduce it)."""
    precision: Mapped[str] = mapped_column(String(16), default="fp32", server_default="fp32")
    backend: Mapped[str] = mapped_column(String(32), default="", server_default="")
    """The backend a variant was made for and measured on ('openvino'), which runs it at
    `precision` ('bf16', 'int8+bf16'); '' for a file run as it is, on ONNX Runtime by default
    (uploads, samples, ONNX Runtime's variants)."""
    threads: Mapped[int | None] = mapped_column(Integer)
    """Intra-op threads the variant was measured at; None: the runtime's default."""
    input_profile: Mapped[dict[str, Any] | None]
    """How every job feeds this model (optistudio.core.data.input_profile.InputProfile as JSON); None
    until proposed. Variants use their original's."""
    task: Mapped[str | None] = mapped_column(String(32))
    """The task the user set on the card (an evaluator's name, or 'none' for cosine and top-1
    alone) that every job judges the model in; None: recognized from its outputs. Variants
    use their original's."""
    created_at: Mapped[datetime] = _created_at()


class Environment(Base):
    """Where measurements were taken (backend versions, device, CPU flags), deduplicated."""

    __tablename__ = "environments"

    id: Mapped[int] = mapped_column(primary_key=True)
    fingerprint: Mapped[str] = mapped_column(String(64), unique=True)
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = _created_at()


class Job(Base):
    """One unit of worker work; the row is the source of truth for status and progress."""

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[JobKind] = mapped_column(JobKindColumn())
    status: Mapped[JobStatus] = mapped_column(
        _string_enum(JobStatus, 16), index=True, default=JobStatus.queued
    )
    progress: Mapped[float] = mapped_column(Float, default=0.0, server_default=text("0"))
    message: Mapped[str] = mapped_column(Text, default="", server_default="")
    """Progress while running; the outcome when done (an error's message, never its hint)."""
    error_code: Mapped[str | None] = mapped_column(String(32))
    """What kind of failure (a value of optistudio.core.errors.ErrorCode); None on success, and
    on rows from before error codes, whose message still ends with the hint."""
    error_hint: Mapped[str | None] = mapped_column(Text)
    """What to try next, shown apart from the message."""
    error_detail: Mapped[str | None] = mapped_column(Text)
    """A bug's traceback, for developers; never shown in the UI."""
    spec: Mapped[dict[str, Any]]
    result: Mapped[dict[str, Any] | None]
    """A summary the job kind defines (e.g. a comparison's ratio and interval); rows of numbers
    go to measurements."""
    model_id: Mapped[int | None] = mapped_column(
        ForeignKey("models.id", ondelete="RESTRICT"), index=True
    )
    environment_id: Mapped[int | None] = mapped_column(ForeignKey("environments.id"))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    celery_task_id: Mapped[str | None] = mapped_column(String(64))
    worker: Mapped[str | None] = mapped_column(String(255))
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default=text("0"))
    created_at: Mapped[datetime] = _created_at()
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]

    model: Mapped[Model | None] = relationship()
    environment: Mapped[Environment | None] = relationship()
    measurements: Mapped[list[Measurement]] = relationship(
        back_populates="job", cascade="all, delete-orphan", passive_deletes=True
    )

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL


class Measurement(Base):
    """One number in long format: (job, backend, batch size, threads, metric) -> value."""

    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("job_id", "backend", "batch_size", "threads", "metric"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    backend: Mapped[str] = mapped_column(String(32))
    batch_size: Mapped[int] = mapped_column(Integer)
    threads: Mapped[int] = mapped_column(Integer)
    metric: Mapped[str] = mapped_column(String(64))
    value: Mapped[float] = mapped_column(Float)
    unit: Mapped[str] = mapped_column(String(16))

    job: Mapped[Job] = relationship(back_populates="measurements")


class WorkerRecord(Base):
    """A worker process and what it can serve, refreshed by its heartbeat."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(primary_key=True)
    hostname: Mapped[str] = mapped_column(String(255), unique=True)
    queues: Mapped[list[str]] = mapped_column(JSON)
    inventory: Mapped[dict[str, Any]]
    started_at: Mapped[datetime]
    heartbeat_at: Mapped[datetime] = mapped_column(index=True)
    stopped_at: Mapped[datetime | None]


class Share(Base):
    """A read-only snapshot of a comparison behind an unguessable token; revocable by its owner."""

    __tablename__ = "shares"

    id: Mapped[int] = mapped_column(primary_key=True)
    token: Mapped[str] = mapped_column(String(64), unique=True)
    owner: Mapped[str] = mapped_column(String(255), index=True)
    title: Mapped[str] = mapped_column(String(255), default="", server_default="")
    snapshot: Mapped[dict[str, Any]]
    """Frozen at creation: what the shared page renders; later results never change it."""
    created_at: Mapped[datetime] = _created_at()
    revoked_at: Mapped[datetime | None]
