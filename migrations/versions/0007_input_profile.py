"""Models keep an input profile: the shapes, batch axes and fixed values every job runs them at.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

NULL for models stored before: the catalog proposes one when a card or a job first needs it
(optistudio.services.catalog.input_profile), from the stored model card alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("input_profile", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("input_profile")
