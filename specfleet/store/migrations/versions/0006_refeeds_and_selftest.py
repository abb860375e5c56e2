"""runs.refed_tokens: tokens a rollback fed again; hosts.selftest: each target's self-test

A model whose layers keep recurrent or convolution state cannot drop rejected verify rows;
its runner restores the state kept before the verify and feeds the accepted tokens again.
That re-feed is a counter like the others; runs stored before it read 0. A worker proves each
engine and device on tiny models of every cache family when it starts; the result is kept
with the host.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01 22:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("refed_tokens", sa.Integer(), nullable=True))
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("selftest", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("hosts", schema=None) as batch_op:
        batch_op.drop_column("selftest")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("refed_tokens")
