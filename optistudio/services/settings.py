"""Process settings, read once from OPTISTUDIO_* environment variables and validated at start."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob of a studio, worker or CLI process. The README's table lists them."""

    model_config = SettingsConfigDict(env_prefix="OPTISTUDIO_", extra="forbid")

    data_dir: Path = Field(
        default=Path("data"), description="Folder for the database, artifacts and Redis data."
    )
    database_url: str = Field(
        default="", description="SQLAlchemy URL; empty means SQLite at DATA_DIR/optistudio.db."
    )
    broker_url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="Celery broker (Redis). `optistudio up` sets it to its embedded Redis.",
    )
    max_upload_mb: int = Field(
        default=512,
        ge=1,
        description="Largest model (file, or .zip of a folder) a browser upload may send; local "
        "files (the CLI, the Python face) and the model roots have no such limit.",
    )
    model_roots: str = Field(
        default="",
        description="Folders on the workers' shared storage the studio may add models from "
        "without an upload, separated by ':' (';' on Windows); empty = off.",
    )
    host: str = Field(default="127.0.0.1", description="Address the studio listens on.")
    ui_port: int = Field(default=8501, ge=0, le=65535, description="Studio port (0 = free port).")
    redis_port: int = Field(
        default=0, ge=0, le=65535, description="Embedded Redis port (0 = a free port)."
    )
    worker_concurrency: int = Field(default=1, ge=1, le=64, description="Worker processes.")
    queues: str = Field(default="cpu", description="Comma-separated queues a worker consumes.")
    backends: str = Field(
        default="", description="Comma-separated backends a worker offers; empty = all it has."
    )
    heartbeat_s: float = Field(
        default=10.0, gt=0, description="Seconds between a worker's inventory heartbeats."
    )
    job_time_limit_s: int = Field(
        default=3600, ge=10, description="Longest a job may run before it is stopped."
    )

    artifact_store: str = Field(
        default="",
        description="Where models live for every worker: empty = the shared folder "
        "DATA_DIR/artifacts; s3://bucket/prefix = an S3-compatible bucket (AWS_* credentials).",
    )
    s3_endpoint_url: str = Field(
        default="", description="URL of an S3-compatible server (MinIO, Ceph...); empty = AWS."
    )
    max_tensor_mb: int = Field(
        default=0,
        ge=0,
        description="Largest tensor a model may declare (initializer or fixed-shape input/output); "
        "0 = half of this machine's memory.",
    )
    load_check_time_s: float = Field(
        default=120.0,
        gt=0,
        description="Longest ONNX Runtime may take to load a new upload (in a process of its own) "
        "before the upload is refused.",
    )
    load_check_memory_mb: int = Field(
        default=0,
        ge=0,
        description="Memory ONNX Runtime may use to load a new upload before it is refused; "
        "0 = 4x the model's size, at least 4096 MB, at most this machine's memory.",
    )
    allow_open: bool = Field(
        default=False,
        description="Let `optistudio up` serve a non-loopback --host with no password and no "
        "OpenID Connect (anyone who reaches the port uses the studio).",
    )
    studio_password: SecretStr = Field(
        default=SecretStr(""),
        description="Password the studio asks for (empty = no login); never logged or shown.",
    )

    @field_validator("artifact_store")
    @classmethod
    def _s3_url(cls, value: str) -> str:
        bucket = value.removeprefix("s3://").split("/")[0]
        if value and (not value.startswith("s3://") or not bucket):
            raise ValueError(f"{value!r} is not s3://bucket/prefix (empty: the shared folder)")
        return value

    @model_validator(mode="after")
    def _resolve(self) -> Settings:
        self.data_dir = self.data_dir.expanduser().resolve()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.data_dir / 'optistudio.db'}"
        return self

    @property
    def artifact_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def max_upload_bytes(self) -> int:
        return self.max_upload_mb * 1024 * 1024

    @property
    def model_root_paths(self) -> list[Path]:
        """The model roots, symbolic links resolved, in the order given; empty when off."""
        parts = [part.strip() for part in self.model_roots.split(os.pathsep)]
        return [Path(part).expanduser().resolve() for part in parts if part]

    @property
    def max_tensor_bytes(self) -> int | None:
        """None lets intake use half of this machine's memory."""
        return self.max_tensor_mb * 1024 * 1024 or None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
