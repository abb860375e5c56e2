"""Row values: hashes, RunSpec/RunResult <-> `runs` columns, and dialect-aware inserts."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

import specfleet
from specfleet.engine.config import LookupOptions
from specfleet.jobs.run import LoopGuard, RunResult, RunSpec, Target
from specfleet.store.errors import StoreConflict, UnknownRun, UnreadableValue
from specfleet.store.rows import NUMBER_TYPES
from specfleet.store.tables import Run

# Keep each statement's bound parameters well under SQLite's limit.
KEY_CHUNK = 500
HOST_KEYS = ("machine_id", "kind", "os", "arch", "chip", "memory_gb", "versions", "selftest",
             "read_gb_per_s")
# RunResult fields copied onto the run row as they are; the rest are handled by hand (a
# worker-measured `calibration` is stored by the head in width_costs, not on the run).
_BY_HAND = frozenset({"run_key", "status", "error", "target", "token_ids", "load_before",
                      "load_after", "prompt_hash", "started_at", "finished_at", "calibration"})
_RESULT_FIELDS = tuple(name for name in RunResult.model_fields if name not in _BY_HAND)


def utcnow() -> datetime:
    """Now as naive UTC (the store's datetime convention)."""
    return datetime.now(UTC).replace(tzinfo=None)


def naive_utc(moment: datetime | None) -> datetime | None:
    """An aware datetime converted to naive UTC; a naive one is taken as UTC already."""
    if moment is None or moment.tzinfo is None:
        return moment
    return moment.astimezone(UTC).replace(tzinfo=None)


def json_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of `obj`."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def result_hash(result: RunResult) -> str:
    """What makes two writes of one result identical: every field, canonically."""
    return json_hash(result.model_dump(mode="json"))


def host_values(info: dict, now: datetime) -> dict[str, Any]:
    row = {key: info.get(key) for key in HOST_KEYS}
    row["versions"] = row["versions"] or {}
    row.update(name=info["name"], first_seen_at=now, last_seen_at=now)
    return row


def _dialect_insert(session: Session, model):
    name = session.get_bind().dialect.name
    return (postgresql.insert if name == "postgresql" else sqlite.insert)(model)


def upsert(session: Session, model, row: dict, keys: list[str], exclude=()) -> None:
    stmt = _dialect_insert(session, model).values(row)
    changes = {k: stmt.excluded[k] for k in row if k not in keys and k not in exclude}
    session.execute(stmt.on_conflict_do_update(index_elements=keys, set_=changes))


def insert_ignore(session: Session, model, rows: list[dict]) -> None:
    if rows:
        session.execute(_dialect_insert(session, model).on_conflict_do_nothing(), rows)


def bulk_insert(session: Session, model, rows: list[dict]) -> None:
    if rows:
        session.execute(insert(model), rows)


def check_new_keys(session: Session, keys: list[str]) -> None:
    """Refuse a plan whose run keys already exist (resubmitting must not double runs)."""
    for i in range(0, len(keys), KEY_CHUNK):
        chunk = keys[i : i + KEY_CHUNK]
        hit = session.execute(
            select(Run.run_key, Run.matrix_id, Run.job_id).where(Run.run_key.in_(chunk)).limit(1)
        ).first()
        if hit is not None:
            owner = hit.matrix_id or hit.job_id
            raise StoreConflict(f"run key {hit.run_key!r} already exists (in {owner!r})")


def locked_run(session: Session, run_key: str) -> Run:
    """The run of this key, its row locked for the rest of the transaction (PostgreSQL).

    Raises:
        UnknownRun: no run with this key.
    """
    run = session.scalars(
        select(Run).where(Run.run_key == run_key).with_for_update()
    ).one_or_none()
    if run is None:
        raise UnknownRun(f"no run with key {run_key!r}")
    return run


def planned_run(spec: RunSpec, order: int, now: datetime, matrix_id=None, job_id=None) -> dict:
    """The `runs` row of a planned run, status `pending`."""
    return {
        "run_key": spec.run_key, "matrix_id": matrix_id or spec.matrix_id, "job_id": job_id,
        "plan_order": order, "host": spec.target.host, "engine": spec.target.engine,
        "device": spec.target.device, "model": spec.model, "prompt_name": spec.prompt_name,
        "prompt_hash": text_hash(spec.prompt_text), "chat": spec.chat, "arm": spec.arm,
        "repeat": spec.repeat, "max_tokens": spec.max_tokens, "temperature": spec.temperature,
        "seed": spec.seed, "lookup": spec.lookup.as_dict(),
        "loop_guard": spec.loop_guard.model_dump() if spec.loop_guard else None,
        "status": "pending", "specfleet_version": specfleet.__version__, "created_at": now,
    }


def apply_result(run: Run, result: RunResult, digest: str, now: datetime) -> None:
    """Copy a result onto its run row."""
    for name in _RESULT_FIELDS:
        setattr(run, name, getattr(result, name))
    run.token_ids = list(result.token_ids)
    run.prompt_token_ids = list(result.prompt_token_ids) or None
    run.load_before = list(result.load_before) if result.load_before else None
    run.load_after = list(result.load_after) if result.load_after else None
    run.status, run.error, run.result_hash = result.status, result.error, digest
    run.specfleet_version = str(result.versions.get("specfleet", run.specfleet_version))
    run.started_at = naive_utc(result.started_at) or run.started_at
    run.finished_at = naive_utc(result.finished_at) or now
    run.lease_until = None  # settled: nobody needs to vouch for it any more


_SPEC_NUMBERS = ("repeat", "max_tokens", "temperature", "seed")


def run_spec(run: Run, prompt_text: str) -> RunSpec:
    """Rebuild the RunSpec of a stored run (to dispatch it again)."""
    for name in _SPEC_NUMBERS:  # a hand edit's text there: the store's one line, as `runs`
        if type(value := getattr(run, name)) not in NUMBER_TYPES:
            raise UnreadableValue.not_a_number(name, run.run_key, value)
    return RunSpec(
        run_key=run.run_key, matrix_id=run.matrix_id,
        target=Target(host=run.host, engine=run.engine, device=run.device),
        model=run.model, prompt_name=run.prompt_name, prompt_text=prompt_text, chat=run.chat,
        arm=run.arm, lookup=LookupOptions(**run.lookup), repeat=run.repeat,
        max_tokens=run.max_tokens, temperature=run.temperature, seed=run.seed,
        loop_guard=LoopGuard(**run.loop_guard) if run.loop_guard else None,
    )
