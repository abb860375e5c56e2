"""runs: covering index for one matrix's rates (speed-up table and status counts)

Replaces ix_runs_matrix_status (its prefix) so the speed-up table of a matrix reads one index
range instead of 2,000 table rows (bench/store.py: ~12 ms -> ~3 ms fetch on SQLite).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29 11:10:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RATES = ["matrix_id", "status", "host", "engine", "device", "model", "prompt_name", "arm",
         "tok_per_s", "noisy"]


def upgrade() -> None:
    op.create_index("ix_runs_matrix_rates", "runs", RATES, unique=False)
    op.drop_index("ix_runs_matrix_status", table_name="runs")


def downgrade() -> None:
    op.create_index("ix_runs_matrix_status", "runs", ["matrix_id", "status"], unique=False)
    op.drop_index("ix_runs_matrix_rates", table_name="runs")
