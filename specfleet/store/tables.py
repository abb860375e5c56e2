"""The result store's tables, as typed SQLAlchemy 2.0 classes.

The Alembic migrations in `migrations/versions/` create exactly these tables; a test checks
that the two agree. Datetimes are naive UTC everywhere (SQLite keeps no time zone).
Host names in `runs`, `width_costs` and `load_samples` are plain strings (no foreign key),
so a run can be planned before its host ever reported in.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from specfleet.engine.stats import COUNTER_FIELDS

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# What no PostgreSQL text holds (a NUL) or no UTF-8 encodes (a lone surrogate).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


class StoredText(TypeDecorator[str]):
    """Text a worker returned (a reply, an error): a NUL, which PostgreSQL's text cannot
    hold, and a lone surrogate, which no UTF-8 encodes, are stored as U+FFFD on both backends
    alike, so the run is stored and reads back the same on either; its tokens stay exact."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect) -> str | None:
        return None if value is None else _UNSTORABLE.sub("\ufffd", value)


class ShapedJSON(TypeDecorator[Any]):
    """JSON that reads back as the shape specfleet writes (an object, or an array): a hand
    edit that left another shape there (`"abc"` for a run's versions) is a ValueError as it is
    read, which the store says in one line, not a traceback in whatever reads it later."""

    impl = JSON
    cache_ok = True

    def __init__(self, shape: type) -> None:
        super().__init__()
        self.shape = shape

    def process_result_value(self, value: Any, dialect) -> Any:
        if value is not None and not isinstance(value, self.shape):
            expected = "an object" if self.shape is dict else "an array"
            raise ValueError(f"a JSON column holds {type(value).__name__} {value!r:.40}, "
                             f"not {expected}")
        return value


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: ShapedJSON(dict), list[Any]: ShapedJSON(list),
                           datetime: DateTime()}


class Host(Base):
    __tablename__ = "hosts"

    name: Mapped[str] = mapped_column(String(128), primary_key=True)
    machine_id: Mapped[str | None] = mapped_column(String(128))
    kind: Mapped[str | None] = mapped_column(String(64))
    os: Mapped[str | None] = mapped_column(String(128))
    arch: Mapped[str | None] = mapped_column(String(32))
    chip: Mapped[str | None] = mapped_column(String(128))
    memory_gb: Mapped[float | None] = mapped_column(Float)
    versions: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Target label -> its start-up self-test (workers/selftest.py); None before it existed.
    selftest: Mapped[dict[str, Any] | None] = mapped_column()
    # Memory read bandwidth measured when its worker last started (workers/bandwidth.py).
    read_gb_per_s: Mapped[float | None] = mapped_column(Float)
    first_seen_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]


ID_CHARS = 64  # the width of a matrix's and a generation job's id


class Matrix(Base):
    __tablename__ = "matrices"

    id: Mapped[str] = mapped_column(String(ID_CHARS), primary_key=True)
    name: Mapped[str] = mapped_column(String(256))
    spec: Mapped[dict[str, Any]]
    spec_hash: Mapped[str] = mapped_column(String(64))
    submitted_at: Mapped[datetime] = mapped_column(index=True)
    finished_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(16))
    specfleet_version: Mapped[str] = mapped_column(String(32))
    # The driver running the matrix and how long its heartbeat vouches for it.
    driver_id: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[datetime | None]


class GenerationJob(Base):
    """A batch of prompts run on one target; its runs point here through `runs.job_id`."""

    __tablename__ = "generation_jobs"

    id: Mapped[str] = mapped_column(String(ID_CHARS), primary_key=True)
    name: Mapped[str] = mapped_column(String(256))
    host: Mapped[str] = mapped_column(String(128))
    engine: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(256))
    params: Mapped[dict[str, Any]] = mapped_column(default=dict)
    submitted_at: Mapped[datetime]
    finished_at: Mapped[datetime | None]
    status: Mapped[str] = mapped_column(String(16))
    specfleet_version: Mapped[str] = mapped_column(String(32))
    # The `job generate` driver running it and how long its heartbeat vouches for it.
    driver_id: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[datetime | None]


class Prompt(Base):
    """Prompt texts, stored once per distinct text (runs refer to them by hash)."""

    __tablename__ = "prompts"

    text_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    text: Mapped[str] = mapped_column(Text)


class Run(Base):
    """One planned run and, once measured, everything `RunResult` carries."""

    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_matrix_plan", "matrix_id", "plan_order"),
        # Covers a matrix's rates (speed-up table) and its status counts.
        Index(
            "ix_runs_matrix_rates",
            "matrix_id", "status", "host", "engine", "device", "model", "prompt_name", "arm",
            "tok_per_s", "noisy",
        ),
        # Covers one cell's history: the cell columns, then what the query reads.
        Index(
            "ix_runs_cell",
            "model", "prompt_name", "arm", "host", "engine", "device", "status", "matrix_id",
            "tok_per_s",
        ),
        Index("ix_runs_finished_at", "finished_at"),
        Index("ix_runs_host", "host"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_key: Mapped[str] = mapped_column(String(128), unique=True)
    matrix_id: Mapped[str | None] = mapped_column(ForeignKey("matrices.id", ondelete="CASCADE"))
    job_id: Mapped[str | None] = mapped_column(
        ForeignKey("generation_jobs.id", ondelete="CASCADE"), index=True
    )
    plan_order: Mapped[int] = mapped_column(Integer)
    # Identity of the run (from RunSpec).
    host: Mapped[str] = mapped_column(String(128))
    engine: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(256))
    weights_hash: Mapped[str | None] = mapped_column(String(128))
    prompt_name: Mapped[str] = mapped_column(String(256))
    prompt_hash: Mapped[str] = mapped_column(ForeignKey("prompts.text_hash"))
    chat: Mapped[bool] = mapped_column(Boolean, default=True)
    arm: Mapped[str] = mapped_column(String(16))
    resolved_policy: Mapped[str | None] = mapped_column(String(16))
    repeat: Mapped[int] = mapped_column(Integer, default=0)
    max_tokens: Mapped[int] = mapped_column(Integer)
    temperature: Mapped[float] = mapped_column(Float, default=0.0)
    seed: Mapped[int | None] = mapped_column(Integer)
    lookup: Mapped[dict[str, Any]] = mapped_column(default=dict)
    loop_guard: Mapped[dict[str, Any] | None] = mapped_column()
    # Status.
    status: Mapped[str] = mapped_column(String(16))
    error: Mapped[str | None] = mapped_column(StoredText)
    # Who runs it: the driver that marked it running, and its heartbeat lease.
    driver_id: Mapped[str | None] = mapped_column(String(128))
    lease_until: Mapped[datetime | None]
    result_hash: Mapped[str | None] = mapped_column(String(64))
    # Output and measurements (from RunResult).
    output_text: Mapped[str | None] = mapped_column(StoredText)
    token_ids: Mapped[list[Any] | None] = mapped_column()
    prompt_token_ids: Mapped[list[Any] | None] = mapped_column()  # what `replay` re-runs
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    generated_tokens: Mapped[int | None] = mapped_column(Integer)
    prefill_s: Mapped[float | None] = mapped_column(Float)
    decode_s: Mapped[float | None] = mapped_column(Float)
    total_s: Mapped[float | None] = mapped_column(Float)
    warmup_s: Mapped[float | None] = mapped_column(Float)
    tok_per_s: Mapped[float | None] = mapped_column(Float)
    stop_reason: Mapped[str | None] = mapped_column(String(16))
    # The loop's counters: one nullable integer per `engine.stats.COUNTER_FIELDS` name, in order
    # (the class body's namespace is the dict declarative maps; a new counter needs a migration).
    locals().update({name: mapped_column(Integer, nullable=True) for name in COUNTER_FIELDS})
    loop_share: Mapped[float | None] = mapped_column(Float)
    noisy: Mapped[bool | None] = mapped_column(Boolean)
    # Host conditions before/after the run (`workers/conditions`) and the throttle verdict.
    conditions: Mapped[dict[str, Any] | None] = mapped_column()
    throttled: Mapped[bool | None] = mapped_column(Boolean)
    throttle_reason: Mapped[str | None] = mapped_column(StoredText)
    load_before: Mapped[list[Any] | None] = mapped_column()
    load_after: Mapped[list[Any] | None] = mapped_column()
    engine_config: Mapped[dict[str, Any] | None] = mapped_column()
    versions: Mapped[dict[str, Any] | None] = mapped_column()
    specfleet_version: Mapped[str] = mapped_column(String(32), index=True)
    host_fingerprint: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class WidthCost(Base):
    """Measured cost of one verify width on a target (synchronous and pipelined)."""

    __tablename__ = "width_costs"
    __table_args__ = (
        Index("ix_width_costs_target", "host", "engine", "device", "model", "width"),
        Index(
            "ix_width_costs_calibration",
            "engine", "device", "model", "host_fingerprint", "measured_at",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(128))
    engine: Mapped[str] = mapped_column(String(16))
    device: Mapped[str] = mapped_column(String(16))
    model: Mapped[str] = mapped_column(String(256))
    width: Mapped[int] = mapped_column(Integer)
    sync_ms: Mapped[float] = mapped_column(Float)
    pipelined_ms: Mapped[float | None] = mapped_column(Float)
    measured_at: Mapped[datetime]
    # One measurement's widths share `calibration`; its ratio comes with spread and n.
    calibration: Mapped[str | None] = mapped_column(String(32))
    host_fingerprint: Mapped[str | None] = mapped_column(String(128))
    weights_hash: Mapped[str | None] = mapped_column(String(128))
    ratio: Mapped[float | None] = mapped_column(Float)
    ratio_lo: Mapped[float | None] = mapped_column(Float)
    ratio_hi: Mapped[float | None] = mapped_column(Float)
    n: Mapped[int | None] = mapped_column(Integer)
    flagged: Mapped[bool | None] = mapped_column(Boolean)
    provenance: Mapped[dict[str, Any] | None] = mapped_column()


class LoadSample(Base):
    """One load reading of a host (the noisy-host series)."""

    __tablename__ = "load_samples"
    __table_args__ = (Index("ix_load_samples_host_t", "host", "t"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    host: Mapped[str] = mapped_column(String(128))
    matrix_id: Mapped[str | None] = mapped_column(
        ForeignKey("matrices.id", ondelete="CASCADE"), index=True
    )
    t: Mapped[datetime]
    load1: Mapped[float] = mapped_column(Float)
    load5: Mapped[float | None] = mapped_column(Float)
    load15: Mapped[float | None] = mapped_column(Float)
    cpu_util: Mapped[float | None] = mapped_column(Float)
    gpu_util: Mapped[float | None] = mapped_column(Float)
