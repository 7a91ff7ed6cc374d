"""Process settings, read once from OPTISTUDIO_* environment variables and validated at start."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, model_validator
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
    max_upload_mb: int = Field(default=512, ge=1, description="Largest model file accepted.")
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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
