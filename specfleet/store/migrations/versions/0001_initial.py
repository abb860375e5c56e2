"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 10:53:41.532496

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# revision identifiers, used by Alembic.
revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Upgrade schema: each table with its indexes, in the order Alembic generated them."""
    _create_generation_jobs()
    _create_hosts()
    _create_matrices()
    _create_prompts()
    _create_width_costs()
    _create_load_samples()
    _create_runs()


def _create_generation_jobs() -> None:
    op.create_table(
        "generation_jobs",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("engine", sa.String(length=16), nullable=False),
        sa.Column("device", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("submitted_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("specfleet_version", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_generation_jobs")),
    )


def _create_hosts() -> None:
    op.create_table(
        "hosts",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("machine_id", sa.String(length=128), nullable=True),
        sa.Column("kind", sa.String(length=64), nullable=True),
        sa.Column("os", sa.String(length=128), nullable=True),
        sa.Column("arch", sa.String(length=32), nullable=True),
        sa.Column("chip", sa.String(length=128), nullable=True),
        sa.Column("memory_gb", sa.Float(), nullable=True),
        sa.Column("versions", sa.JSON(), nullable=False),
        sa.Column("first_seen_at", sa.DateTime(), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_hosts")),
    )


def _create_matrices() -> None:
    op.create_table(
        "matrices",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("spec_hash", sa.String(length=64), nullable=False),
        sa.Column("submitted_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("specfleet_version", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_matrices")),
    )
    with op.batch_alter_table("matrices", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_matrices_submitted_at"), ["submitted_at"], unique=False
        )


def _create_prompts() -> None:
    op.create_table(
        "prompts",
        sa.Column("text_hash", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("text_hash", name=op.f("pk_prompts")),
    )


def _create_width_costs() -> None:
    op.create_table(
        "width_costs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("engine", sa.String(length=16), nullable=False),
        sa.Column("device", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("sync_ms", sa.Float(), nullable=False),
        sa.Column("pipelined_ms", sa.Float(), nullable=True),
        sa.Column("measured_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_width_costs")),
    )
    with op.batch_alter_table("width_costs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_width_costs_target", ["host", "engine", "device", "model", "width"], unique=False
        )


def _create_load_samples() -> None:
    op.create_table(
        "load_samples",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("matrix_id", sa.String(length=64), nullable=True),
        sa.Column("t", sa.DateTime(), nullable=False),
        sa.Column("load1", sa.Float(), nullable=False),
        sa.Column("load5", sa.Float(), nullable=True),
        sa.Column("load15", sa.Float(), nullable=True),
        sa.Column("cpu_util", sa.Float(), nullable=True),
        sa.Column("gpu_util", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(
            ["matrix_id"],
            ["matrices.id"],
            name=op.f("fk_load_samples_matrix_id_matrices"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_load_samples")),
    )
    with op.batch_alter_table("load_samples", schema=None) as batch_op:
        batch_op.create_index("ix_load_samples_host_t", ["host", "t"], unique=False)
        batch_op.create_index(batch_op.f("ix_load_samples_matrix_id"), ["matrix_id"], unique=False)


def _create_runs() -> None:
    op.create_table("runs", *_run_request_columns(), *_run_result_columns(),
                    *_run_constraints())
    _create_runs_indexes()


def _run_request_columns() -> list[sa.Column]:
    """What was asked: the run's key, its matrix or job, target, model, prompt and settings."""
    return [
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("run_key", sa.String(length=128), nullable=False),
        sa.Column("matrix_id", sa.String(length=64), nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.Column("plan_order", sa.Integer(), nullable=False),
        sa.Column("host", sa.String(length=128), nullable=False),
        sa.Column("engine", sa.String(length=16), nullable=False),
        sa.Column("device", sa.String(length=16), nullable=False),
        sa.Column("model", sa.String(length=256), nullable=False),
        sa.Column("weights_hash", sa.String(length=128), nullable=True),
        sa.Column("prompt_name", sa.String(length=256), nullable=False),
        sa.Column("prompt_hash", sa.String(length=64), nullable=False),
        sa.Column("chat", sa.Boolean(), nullable=False),
        sa.Column("arm", sa.String(length=16), nullable=False),
        sa.Column("resolved_policy", sa.String(length=16), nullable=True),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("temperature", sa.Float(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("lookup", sa.JSON(), nullable=False),
        sa.Column("loop_guard", sa.JSON(), nullable=True),
    ]


def _run_result_columns() -> list[sa.Column]:
    """What came back: status, reply, timings, counters, host load and provenance."""
    return [
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("result_hash", sa.String(length=64), nullable=True),
        sa.Column("output_text", sa.Text(), nullable=True),
        sa.Column("token_ids", sa.JSON(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("generated_tokens", sa.Integer(), nullable=True),
        sa.Column("prefill_s", sa.Float(), nullable=True),
        sa.Column("decode_s", sa.Float(), nullable=True),
        sa.Column("total_s", sa.Float(), nullable=True),
        sa.Column("warmup_s", sa.Float(), nullable=True),
        sa.Column("tok_per_s", sa.Float(), nullable=True),
        sa.Column("stop_reason", sa.String(length=16), nullable=True),
        sa.Column("rounds", sa.Integer(), nullable=True),
        sa.Column("drafted_rounds", sa.Integer(), nullable=True),
        sa.Column("paused_rounds", sa.Integer(), nullable=True),
        sa.Column("proposed", sa.Integer(), nullable=True),
        sa.Column("accepted", sa.Integer(), nullable=True),
        sa.Column("shadow_confirmations", sa.Integer(), nullable=True),
        sa.Column("loop_share", sa.Float(), nullable=True),
        sa.Column("noisy", sa.Boolean(), nullable=True),
        sa.Column("load_before", sa.JSON(), nullable=True),
        sa.Column("load_after", sa.JSON(), nullable=True),
        sa.Column("engine_config", sa.JSON(), nullable=True),
        sa.Column("versions", sa.JSON(), nullable=True),
        sa.Column("specfleet_version", sa.String(length=32), nullable=False),
        sa.Column("host_fingerprint", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=True),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
    ]


def _run_constraints() -> list:
    """Its matrix or job (deleted with them), its prompt, one row per run key."""
    return [
        sa.ForeignKeyConstraint(
            ["job_id"],
            ["generation_jobs.id"],
            name=op.f("fk_runs_job_id_generation_jobs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["matrix_id"],
            ["matrices.id"],
            name=op.f("fk_runs_matrix_id_matrices"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["prompt_hash"], ["prompts.text_hash"], name=op.f("fk_runs_prompt_hash_prompts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("run_key", name=op.f("uq_runs_run_key")),
    ]


def _create_runs_indexes() -> None:
    """The indexes a cell, a matrix's plan, a job and the history read runs by."""
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(
            "ix_runs_cell",
            [
                "model",
                "prompt_name",
                "arm",
                "host",
                "engine",
                "device",
                "status",
                "matrix_id",
                "tok_per_s",
            ],
            unique=False,
        )
        batch_op.create_index("ix_runs_finished_at", ["finished_at"], unique=False)
        batch_op.create_index("ix_runs_host", ["host"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_job_id"), ["job_id"], unique=False)
        batch_op.create_index("ix_runs_matrix_plan", ["matrix_id", "plan_order"], unique=False)
        batch_op.create_index("ix_runs_matrix_status", ["matrix_id", "status"], unique=False)
        batch_op.create_index(
            batch_op.f("ix_runs_specfleet_version"), ["specfleet_version"], unique=False
        )


def downgrade() -> None:
    """Downgrade schema."""
    # ### commands auto generated by Alembic - please adjust! ###
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_specfleet_version"))
        batch_op.drop_index("ix_runs_matrix_status")
        batch_op.drop_index("ix_runs_matrix_plan")
        batch_op.drop_index(batch_op.f("ix_runs_job_id"))
        batch_op.drop_index("ix_runs_host")
        batch_op.drop_index("ix_runs_finished_at")
        batch_op.drop_index("ix_runs_cell")

    op.drop_table("runs")
    with op.batch_alter_table("load_samples", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_load_samples_matrix_id"))
        batch_op.drop_index("ix_load_samples_host_t")

    op.drop_table("load_samples")
    with op.batch_alter_table("width_costs", schema=None) as batch_op:
        batch_op.drop_index("ix_width_costs_target")

    op.drop_table("width_costs")
    op.drop_table("prompts")
    with op.batch_alter_table("matrices", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_matrices_submitted_at"))

    op.drop_table("matrices")
    op.drop_table("hosts")
    op.drop_table("generation_jobs")
    # ### end Alembic commands ###
