"""matrices, runs: driver_id and lease_until (run ownership)

A running matrix and each of its running runs record the driver that runs them and a
heartbeat lease. `resume` takes pending runs and runs whose lease expired, never a live
driver's; a matrix whose driver stopped renewing reads `interrupted`.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("matrices", "runs")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("driver_id", sa.String(length=128), nullable=True))
            batch.add_column(sa.Column("lease_until", sa.DateTime(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("lease_until")
            batch.drop_column("driver_id")
