"""Models record the backend a variant runs on and the threads it was measured at; a file is
one model per (content, backend, precision).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-09

A variant that only runs the same bytes elsewhere (BF16 inference on OpenVINO, the original on
OpenVINO at FP32, NNCF's INT8 with the rest in BF16) used to share the original's row, since
the content hash was unique; it now has its own row pointing at the same stored file. Rows
stored before get backend '' (run as they are, ONNX Runtime by default) and no threads.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("backend", sa.String(32), nullable=False, server_default=""))
        batch.add_column(sa.Column("threads", sa.Integer(), nullable=True))
        batch.drop_constraint("uq_models_sha256", type_="unique")
        batch.create_unique_constraint(
            "uq_models_sha256_backend_precision", ["sha256", "backend", "precision"]
        )


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_constraint("uq_models_sha256_backend_precision", type_="unique")
        batch.create_unique_constraint("uq_models_sha256", ["sha256"])
        batch.drop_column("threads")
        batch.drop_column("backend")
