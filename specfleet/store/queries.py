"""The store's reads: matrices, filtered runs, cells, speed-ups, history and comparisons."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from statistics import median

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from specfleet.jobs.run import RunSpec, Target
from specfleet.store import aggregate
from specfleet.store.errors import UnknownMatrix
from specfleet.store.models import Host, Matrix, Prompt, Run
from specfleet.store.rows import (
    CellRow,
    CompareRow,
    HistoryPoint,
    MatrixRow,
    RunRow,
    SpeedupRow,
)
from specfleet.store.values import naive_utc, run_spec

RUN_FIELDS = tuple(f.name for f in fields(RunRow))
CELL_COLUMNS = (
    Run.host, Run.engine, Run.device, Run.model, Run.prompt_name, Run.arm, Run.tok_per_s,
    Run.noisy, *(getattr(Run, name) for name in aggregate.COUNTERS),
)
Many = str | Sequence[str] | None
_EQ_FILTERS = {
    "host": Run.host, "engine": Run.engine, "device": Run.device, "model": Run.model,
    "prompt": Run.prompt_name, "arm": Run.arm, "matrix": Run.matrix_id, "job": Run.job_id,
    "status": Run.status, "specfleet_version": Run.specfleet_version,
}


def run_conditions(
    *, host: Many = None, kind: Many = None, engine: Many = None, device: Many = None,
    model: Many = None, prompt: Many = None, arm: Many = None, matrix: Many = None,
    job: Many = None, status: Many = None, specfleet_version: Many = None,
    since: datetime | None = None, until: datetime | None = None,
    matrix_id: Many = None, job_id: Many = None,
) -> list:
    """WHERE conditions for `runs`; each filter takes one value or a list of values.

    `kind` matches the host kind recorded by `upsert_host`; `since`/`until` bound the run's
    finish time (runs not finished are left out when either is given). `matrix_id` and
    `job_id` are accepted as spellings of `matrix` and `job`.
    """
    matrix = matrix if matrix is not None else matrix_id
    job = job if job is not None else job_id
    given = dict(host=host, engine=engine, device=device, model=model, prompt=prompt, arm=arm,
                 matrix=matrix, job=job, status=status, specfleet_version=specfleet_version)
    conds = [_in(_EQ_FILTERS[name], value) for name, value in given.items() if value is not None]
    if kind is not None:
        conds.append(Run.host.in_(select(Host.name).where(_in(Host.kind, kind))))
    if since is not None:
        conds.append(Run.finished_at >= naive_utc(since))
    if until is not None:
        conds.append(Run.finished_at < naive_utc(until))
    return conds


def _in(column, value):
    if isinstance(value, str):
        return column == value
    return column.in_(list(value))


class StoreQueries:
    """Read methods of `Store` (mixed in; needs `_read()` and `display_url`)."""

    display_url: str
    engine: Engine

    def _read(self) -> Session:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def count_matrices(self) -> int:
        """How many matrices the store holds."""
        with self.engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(Matrix)).scalar_one()

    def get_matrix(self, matrix_id: str) -> MatrixRow:
        """One matrix with its run counts per status; UnknownMatrix if there is none."""
        with self._read() as session:
            matrix = session.get(Matrix, matrix_id)
            if matrix is None:
                raise UnknownMatrix(f"no matrix {matrix_id!r} in {self.display_url}")
            return _matrix_row(matrix, _status_counts(session, [matrix_id])[matrix_id])

    def list_matrices(self, limit: int | None = None, offset: int = 0) -> list[MatrixRow]:
        """Matrices, newest first, with their run counts per status (`offset` skips the
        newest ones: pages of `limit`)."""
        with self._read() as session:
            stmt = (select(Matrix).order_by(Matrix.submitted_at.desc(), Matrix.id)
                    .limit(limit).offset(offset or None))
            matrices = session.scalars(stmt).all()
            paged = limit is not None or offset
            counts = _status_counts(session, [m.id for m in matrices] if paged else None)
            return [_matrix_row(m, counts[m.id]) for m in matrices]

    def count_runs(self, **filters) -> int:
        """How many runs match the filters of `run_conditions`."""
        stmt = select(func.count()).select_from(Run).where(*run_conditions(**filters))
        with self.engine.connect() as conn:
            return conn.execute(stmt).scalar_one()

    def newest_matrices(self, limit: int, **filters) -> list[str]:
        """Ids of the newest `limit` matrices holding runs that match the filters."""
        having = select(Run.matrix_id).where(*run_conditions(**filters)).distinct()
        stmt = (select(Matrix.id).where(Matrix.id.in_(having))
                .order_by(Matrix.submitted_at.desc(), Matrix.id).limit(limit))
        with self.engine.connect() as conn:
            return list(conn.scalars(stmt))

    def submitted_times(self, matrix_ids: Sequence[str]) -> dict[str, datetime]:
        """Submission time of each of these matrices (unknown ids are left out)."""
        stmt = select(Matrix.id, Matrix.submitted_at).where(Matrix.id.in_(list(matrix_ids)))
        with self.engine.connect() as conn:
            return dict(conn.execute(stmt).all())

    def runs(self, limit: int | None = None, offset: int = 0, **filters) -> list[RunRow]:
        """Runs matching the filters of `run_conditions`, in matrix and plan order
        (`limit` and `offset`: one page of them)."""
        columns = [getattr(Run, name) for name in RUN_FIELDS]
        stmt = (
            select(*columns).where(*run_conditions(**filters))
            .order_by(Run.matrix_id, Run.job_id, Run.plan_order, Run.id)
            .limit(limit).offset(offset or None)
        )
        with self.engine.connect() as conn:
            return [RunRow(*row) for row in conn.execute(stmt)]

    def runs_not_done(
        self, matrix_id: str, statuses: Sequence[str] | None = None
    ) -> list[RunSpec]:
        """The runs of a matrix that are not `done`, in plan order, as RunSpecs.

        Args:
            matrix_id: the matrix.
            statuses: only runs in these statuses (default: every status but `done`).
        """
        self.get_matrix(matrix_id)
        wanted = Run.status.in_(list(statuses)) if statuses is not None else Run.status != "done"
        stmt = (
            select(Run, Prompt.text).join(Prompt, Prompt.text_hash == Run.prompt_hash)
            .where(Run.matrix_id == matrix_id, wanted).order_by(Run.plan_order)
        )
        with self._read() as session:
            return [run_spec(run, text) for run, text in session.execute(stmt)]

    def cells(self, matrix_id: str | None = None, **filters) -> list[CellRow]:
        """Aggregates of `done` runs per (host, engine, device, model, prompt, arm).

        Args:
            matrix_id: restrict to one matrix (same as `matrix=`).
            **filters: any filter of `run_conditions` (`status` is always `done`).
        """
        if matrix_id is not None:
            filters["matrix"] = matrix_id
        filters["status"] = "done"
        stmt = select(*CELL_COLUMNS).where(*run_conditions(**filters))
        with self.engine.connect() as conn:
            return aggregate.cell_rows(conn.execute(stmt).all())

    def speedups(self, matrix_id: str) -> list[SpeedupRow]:
        """Each arm's median tok/s over plain's in the same target, model and prompt."""
        self.get_matrix(matrix_id)
        return aggregate.speedup_rows(self._rates(matrix_id))

    def compare(self, matrix_a: str, matrix_b: str) -> list[CompareRow]:
        """Every cell of two matrices side by side, ratio = b / a, regressions flagged."""
        self.get_matrix(matrix_a)
        self.get_matrix(matrix_b)
        return aggregate.compare_rows(self._rates(matrix_a), self._rates(matrix_b))

    def _rates(self, matrix_id: str) -> list[aggregate.Rates]:
        stmt = select(*CELL_COLUMNS[:8]).where(Run.matrix_id == matrix_id, Run.status == "done")
        with self.engine.connect() as conn:
            return aggregate.cell_rates(conn.execute(stmt).all())

    def cell_history(
        self, model: str, prompt: str, arm: str, target: Target | str | None = None
    ) -> list[HistoryPoint]:
        """One cell across matrices, oldest first (one point per matrix and target).

        Args:
            target: a Target, a `host/engine/device` label, a host name, or None for all.
        """
        stmt = (
            select(Run.matrix_id, Matrix.name, Matrix.submitted_at, Run.host, Run.engine,
                   Run.device, Run.arm, Run.tok_per_s)
            .join(Matrix, Matrix.id == Run.matrix_id)
            .where(Run.model == model, Run.prompt_name == prompt,
                   Run.arm.in_(sorted({arm, "plain"})), Run.status == "done",
                   *_target_conditions(target))
        )
        groups: dict[tuple, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        with self.engine.connect() as conn:
            for matrix_id, name, submitted_at, host, engine, device, run_arm, tps in conn.execute(
                stmt
            ):
                key = (submitted_at, matrix_id, name, host, engine, device)
                groups[key][run_arm].append(tps)
        return [_history_point(key, arms, arm) for key, arms in sorted(groups.items())
                if arms.get(arm)]


def _target_conditions(target: Target | str | None) -> list:
    if target is None:
        return []
    if isinstance(target, Target):
        return [Run.host == target.host, Run.engine == target.engine, Run.device == target.device]
    parts = target.split("/")[:3]
    columns = (Run.host, Run.engine, Run.device)[: len(parts)]
    return [col == part for col, part in zip(columns, parts, strict=True)]


def _history_point(key: tuple, arms: dict[str, list[float]], arm: str) -> HistoryPoint:
    submitted_at, matrix_id, name, host, engine, device = key
    tps, plain = arms[arm], arms.get("plain")
    mid = float(median(tps))
    plain_mid = float(median(plain)) if plain else None
    return HistoryPoint(
        matrix_id=matrix_id, matrix_name=name, submitted_at=submitted_at, host=host,
        engine=engine, device=device, n=len(tps), median_tok_per_s=mid,
        min_tok_per_s=min(tps), max_tok_per_s=max(tps), spread=aggregate.spread(tps),
        plain_median_tok_per_s=plain_mid, speedup=mid / plain_mid if plain_mid else None,
    )


def _status_counts(session: Session, ids: list[str] | None) -> dict[str, dict[str, int]]:
    """Run counts per status of the given matrices (None: all of them)."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    stmt = select(Run.matrix_id, Run.status, func.count()).group_by(Run.matrix_id, Run.status)
    if ids is not None:
        stmt = stmt.where(Run.matrix_id.in_(ids))
    for matrix_id, status, n in session.execute(stmt):
        counts[matrix_id][status] = n
    return counts


def _matrix_row(matrix: Matrix, counts: dict[str, int]) -> MatrixRow:
    return MatrixRow(
        id=matrix.id, name=matrix.name, spec=matrix.spec, spec_hash=matrix.spec_hash,
        submitted_at=matrix.submitted_at, finished_at=matrix.finished_at, status=matrix.status,
        specfleet_version=matrix.specfleet_version, counts=dict(counts),
    )
