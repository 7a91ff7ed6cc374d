"""Jobs keep an error's code and hint apart from its message; a job may end as timed_out.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Statuses are VARCHAR(16) holding the member values, with no CHECK constraint (0001), so the new
"timed_out" status needs no change here. Rows from before keep NULL code and hint: their message
still carries the hint, and they are shown as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("error_code", sa.String(32), nullable=True))
        batch.add_column(sa.Column("error_hint", sa.Text(), nullable=True))


def downgrade() -> None:
    # Before this revision a timed-out job was a failed one, and the hint ended the message.
    op.execute("UPDATE jobs SET status = 'failed' WHERE status = 'timed_out'")
    op.execute(
        "UPDATE jobs SET message = message || ' ' || error_hint WHERE error_hint IS NOT NULL"
    )
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("error_hint")
        batch.drop_column("error_code")
