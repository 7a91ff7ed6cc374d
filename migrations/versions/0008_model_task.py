"""Models keep the task the user set on the card (what every job judges the model in).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

NULL for models stored before, and for every model whose task nobody set: each job then
recognizes the task from the model's outputs (optistudio.core.numerics.evaluators.recognize).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("task", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("task")
