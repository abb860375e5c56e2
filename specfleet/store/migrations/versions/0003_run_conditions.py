"""runs: host conditions before and after each run, and the throttled flag with its reason

`conditions` holds {"before": {...}, "after": {...}} (`workers/conditions` readings: power,
thermal state, clocks, memory); `throttled` / `throttle_reason` are the worker's verdict.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30 06:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("conditions", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("throttled", sa.Boolean(), nullable=True))
        batch.add_column(sa.Column("throttle_reason", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("throttle_reason")
        batch.drop_column("throttled")
        batch.drop_column("conditions")
