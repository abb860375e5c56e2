"""generation_jobs: driver_id and lease_until (job ownership)

A `job generate` driver renews a heartbeat lease on its job as it does on its runs, so a job
whose driver was killed reads `interrupted` once the lease runs out instead of `running`
forever. Jobs stored before it have no lease: one still marked running reads interrupted.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06 07:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("generation_jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("driver_id", sa.String(length=128), nullable=True))
        batch_op.add_column(sa.Column("lease_until", sa.DateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("generation_jobs", schema=None) as batch_op:
        batch_op.drop_column("lease_until")
        batch_op.drop_column("driver_id")
