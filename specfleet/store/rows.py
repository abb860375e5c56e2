"""Frozen rows the store returns: runs, matrices, generation jobs, width costs and load
samples."""

from __future__ import annotations

import functools
from collections import namedtuple
from dataclasses import dataclass, field, make_dataclass
from datetime import datetime
from typing import Any

from specfleet.store.tables import Run

# The store's own bookkeeping on a run, never read back as part of it.
_NOT_READ = frozenset({"id", "driver_id", "lease_until", "result_hash"})
# Every other `runs` column, in table order (the counters follow `engine.stats.COUNTER_FIELDS`).
_RunColumns: Any = make_dataclass(
    "_RunColumns",
    [(column.name, Any) for column in Run.__table__.columns if column.name not in _NOT_READ],
    frozen=True,
)


# The `runs` columns of numbers (counts, times, rates): SQLite hands back whatever a hand
# edit wrote there (text, a blob), so reads check them (`queries._check_numbers`).
NUMBER_FIELDS = frozenset(column.name for column in Run.__table__.columns
                          if column.type.python_type in (int, float))
NUMBER_TYPES = frozenset({int, float, type(None)})


@dataclass(frozen=True)
class RunRow(_RunColumns):
    """One stored run, everything planned and measured: one field per `runs` column
    (`store/tables.Run`) but the store's bookkeeping (id, lease, result hash), values as stored."""


@functools.cache
def run_fields_row(columns: tuple[str, ...]) -> type:
    """A light row type holding only these `RunRow` fields (one type per set of columns):
    what a page reads from many runs, without decoding the columns it does not show."""
    return namedtuple("RunFields", columns)


@dataclass(frozen=True)
class HostRow:
    """A host as it last reported: kind, OS, chip, memory and library versions."""

    name: str
    machine_id: str | None
    kind: str | None
    os: str | None
    arch: str | None
    chip: str | None
    memory_gb: float | None
    versions: dict[str, Any]
    selftest: dict[str, Any] | None
    first_seen_at: datetime
    last_seen_at: datetime
    read_gb_per_s: float | None = None  # as its worker last measured it


@dataclass(frozen=True)
class MatrixRow:
    """A matrix and how many of its runs are in each status."""

    id: str
    name: str
    spec: dict[str, Any]
    spec_hash: str
    submitted_at: datetime
    finished_at: datetime | None
    status: str
    specfleet_version: str
    counts: dict[str, int] = field(default_factory=dict)
    driver_id: str | None = None  # the driver that runs (or last ran) it
    lease_until: datetime | None = None  # its heartbeat lease (naive UTC)

    @property
    def total_runs(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class JobRow:
    """A generation job: a batch of prompts on one target (its runs: `runs(job=id)`)."""

    id: str
    name: str
    host: str
    engine: str
    device: str
    model: str
    params: dict[str, Any]
    submitted_at: datetime
    finished_at: datetime | None
    status: str
    specfleet_version: str
    driver_id: str | None = None  # the driver that runs (or last ran) it
    lease_until: datetime | None = None  # its heartbeat lease (naive UTC)
    counts: dict[str, int] = field(default_factory=dict)  # its runs per status

    @property
    def total_runs(self) -> int:
        return sum(self.counts.values())


@dataclass(frozen=True)
class WidthCostRow:
    """Cost of one verify width on a target."""

    host: str
    engine: str
    device: str
    model: str
    width: int
    sync_ms: float
    pipelined_ms: float | None
    measured_at: datetime
    calibration: str | None = None
    host_fingerprint: str | None = None
    weights_hash: str | None = None
    ratio: float | None = None
    ratio_lo: float | None = None
    ratio_hi: float | None = None
    n: int | None = None
    flagged: bool | None = None
    provenance: dict[str, Any] | None = None


@dataclass(frozen=True)
class LoadSampleRow:
    """One load reading of a host."""

    host: str
    matrix_id: str | None
    t: datetime
    load1: float
    load5: float | None = None
    load15: float | None = None
    cpu_util: float | None = None
    gpu_util: float | None = None
