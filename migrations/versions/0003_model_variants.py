"""Models remember the original they were made from, the recipe, and their precision.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("recipe", sa.JSON(), nullable=True))
        batch.add_column(
            sa.Column("precision", sa.String(16), server_default="fp32", nullable=False)
        )
        batch.create_index("ix_models_parent_id", ["parent_id"])
        batch.create_foreign_key(
            "fk_models_parent_id_models", "models", ["parent_id"], ["id"], ondelete="RESTRICT"
        )


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_constraint("fk_models_parent_id_models", type_="foreignkey")
        batch.drop_index("ix_models_parent_id")
        batch.drop_column("precision")
        batch.drop_column("recipe")
        batch.drop_column("parent_id")
