"""Frozen rows the store returns: runs, matrices, width costs and load samples."""

from __future__ import annotations

import functools
from collections import namedtuple
from dataclasses import dataclass, field, make_dataclass
from datetime import datetime
from typing import Any

from specfleet.engine.stats import COUNTER_FIELDS


@dataclass(frozen=True)
class _RunOutput:
    """A stored run's fields before its counters: what was planned, its status and output."""

    run_key: str
    matrix_id: str | None
    job_id: str | None
    plan_order: int
    host: str
    engine: str
    device: str
    model: str
    weights_hash: str | None
    prompt_name: str
    prompt_hash: str
    chat: bool
    arm: str
    resolved_policy: str | None
    repeat: int
    max_tokens: int
    temperature: float
    seed: int | None
    lookup: dict[str, Any]
    loop_guard: dict[str, Any] | None
    status: str
    error: str | None
    output_text: str | None
    token_ids: list[int] | None
    prompt_token_ids: list[int] | None
    prompt_tokens: int | None
    generated_tokens: int | None
    prefill_s: float | None
    decode_s: float | None
    total_s: float | None
    warmup_s: float | None
    tok_per_s: float | None
    stop_reason: str | None


# The loop's counters, one per `engine.stats.COUNTER_FIELDS` name, in their place after
# `stop_reason` (None for a peer arm's run and before a run is measured).
_RunCounted: Any = make_dataclass(
    "_RunCounted", [(name, int | None) for name in COUNTER_FIELDS], bases=(_RunOutput,),
    frozen=True,
)


@dataclass(frozen=True)
class RunRow(_RunCounted):
    """One stored run, everything planned and measured."""

    loop_share: float | None
    noisy: bool | None
    conditions: dict[str, Any] | None
    throttled: bool | None
    throttle_reason: str | None
    load_before: list[float] | None
    load_after: list[float] | None
    engine_config: dict[str, Any] | None
    versions: dict[str, Any] | None
    specfleet_version: str
    host_fingerprint: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


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
    read_gb_per_s: float | None = None  # measured when its worker last started


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
