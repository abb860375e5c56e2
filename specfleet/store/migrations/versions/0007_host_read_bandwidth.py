"""hosts.read_gb_per_s: the memory read bandwidth a worker measures when it starts

Plain decoding reads every weight once per token; the record divides this bandwidth by a
run's weight bytes (kept in its engine_config) for the fastest plain decode the host could
reach. Hosts recorded before it read None ("not measured").

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02 02:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("read_gb_per_s", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_column("read_gb_per_s")
