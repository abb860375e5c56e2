"""width_costs: one calibration's ratios with spread, n and provenance; runs: prompt token ids

A width-cost table is now keyed by host fingerprint and weights hash as well as by target and
model, and each width carries its median ratio, lowest and highest per-round ratio, n and a
flag for a width that stays below the previous one (`specfleet calibrate --store`, `job
calibrate`). Runs keep their encoded prompt so `specfleet replay` can recompute a greedy run's
rounds under any policy.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30 06:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

COLUMNS: list[tuple[str, sa.types.TypeEngine]] = [
    ("calibration", sa.String(length=32)),
    ("host_fingerprint", sa.String(length=128)),
    ("weights_hash", sa.String(length=128)),
    ("ratio", sa.Float()),
    ("ratio_lo", sa.Float()),
    ("ratio_hi", sa.Float()),
    ("n", sa.Integer()),
    ("flagged", sa.Boolean()),
    ("provenance", sa.JSON()),
]


def upgrade() -> None:
    with op.batch_alter_table("width_costs", schema=None) as batch_op:
        for name, kind in COLUMNS:
            batch_op.add_column(sa.Column(name, kind, nullable=True))
        batch_op.create_index(
            "ix_width_costs_calibration",
            ["engine", "device", "model", "host_fingerprint", "measured_at"], unique=False,
        )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("prompt_token_ids", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("prompt_token_ids")
    with op.batch_alter_table("width_costs", schema=None) as batch_op:
        batch_op.drop_index("ix_width_costs_calibration")
        for name, _ in reversed(COLUMNS):
            batch_op.drop_column(name)
