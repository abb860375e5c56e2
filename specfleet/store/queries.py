"""The store's reads: matrices, generation jobs and runs by indexed filters (a matrix's runs,
a cell's runs).

Figures (medians, speed-ups, changes) are computed from these rows by `specfleet.stats`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import fields
from datetime import datetime
from itertools import chain
from operator import itemgetter
from typing import Any

from sqlalchemy import Connection, Select, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from specfleet.jobs.run import RunSpec
from specfleet.store.base import StoreCore
from specfleet.store.errors import UnknownMatrix, UnknownRun, UnreadableValue
from specfleet.store.leases import read_run_status, reads_interrupted
from specfleet.store.rows import (
    NUMBER_FIELDS,
    NUMBER_TYPES,
    HostRow,
    JobRow,
    MatrixRow,
    RunRow,
    run_fields_row,
)
from specfleet.store.tables import GenerationJob, Host, Matrix, Prompt, Run
from specfleet.store.values import naive_utc, run_spec, utcnow

RUN_FIELDS = tuple(f.name for f in fields(RunRow))
Many = str | Sequence[str] | None
_EQ_FILTERS = {
    "host": Run.host, "engine": Run.engine, "device": Run.device, "model": Run.model,
    "prompt": Run.prompt_name, "arm": Run.arm, "matrix": Run.matrix_id, "job": Run.job_id,
    "status": Run.status, "specfleet_version": Run.specfleet_version, "run_key": Run.run_key,
}


def run_conditions(
    *, host: Many = None, kind: Many = None, engine: Many = None, device: Many = None,
    model: Many = None, prompt: Many = None, arm: Many = None, matrix: Many = None,
    job: Many = None, status: Many = None, specfleet_version: Many = None,
    since: datetime | None = None, until: datetime | None = None,
    matrix_id: Many = None, job_id: Many = None, run_key: Many = None,
) -> list:
    """WHERE conditions for `runs`; each filter takes one value or a list of values.

    `kind` matches the host kind recorded by `upsert_host`; `since`/`until` bound the run's
    finish time (runs not finished are left out when either is given). `matrix_id` and
    `job_id` are accepted as spellings of `matrix` and `job`.
    """
    matrix = matrix if matrix is not None else matrix_id
    job = job if job is not None else job_id
    given = dict(host=host, engine=engine, device=device, model=model, prompt=prompt, arm=arm,
                 matrix=matrix, job=job, status=status, specfleet_version=specfleet_version,
                 run_key=run_key)
    conds = [_in(_filter_column(name, value), value) for name, value in given.items()
             if value is not None]
    if kind is not None:
        conds.append(Run.host.in_(select(Host.name).where(_in(Host.kind, kind))))
    if since is not None:
        conds.append(Run.finished_at >= naive_utc(since))
    if until is not None:
        conds.append(Run.finished_at < naive_utc(until))
    return conds


def _filter_column(name: str, value: str | Sequence[str]):
    """The column a filter compares; `status` as reads show it where that can differ."""
    wanted = {value} if isinstance(value, str) else set(value)
    if name == "status" and wanted & {"running", "interrupted"}:
        return read_run_status(utcnow())
    return _EQ_FILTERS[name]


def _selected(name: str, now: datetime):
    return read_run_status(now).label("status") if name == "status" else getattr(Run, name)


def _name_holds(part: str | None) -> list:
    """WHERE a matrix's name holds `part` as typed (`%`, `_` and `\\` match themselves),
    case-insensitively; no condition for None."""
    if part is None:
        return []
    literal = part.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return [Matrix.name.ilike(f"%{literal}%", escape="\\")]


def _in(column, value):
    if isinstance(value, str):
        return column == value
    return column.in_(list(value))


class StoreQueries:
    """Read methods of `Store` (mixed in; what they use of it: `base.StoreCore`)."""

    def count_matrices(self: StoreCore, name_contains: str | None = None) -> int:
        """How many matrices the store holds (with `name_contains`: whose name holds it,
        case-insensitively)."""
        stmt = select(func.count()).select_from(Matrix).where(*_name_holds(name_contains))
        with self._connect() as conn:
            return conn.execute(stmt).scalar_one()

    def get_matrix(self: StoreCore, matrix_id: str) -> MatrixRow:
        """One matrix with its run counts per status; UnknownMatrix if there is none."""
        with self._read() as session:
            matrix = session.get(Matrix, matrix_id)
            if matrix is None:
                raise UnknownMatrix(f"no matrix {matrix_id!r} in {self.display_url}; "
                                    f"expected {_id_hint(session, matrix_id)}")
            return _matrix_row(matrix, _status_counts(session, [matrix_id])[matrix_id])

    def stored_id_hint(self: StoreCore, given: str) -> str:
        """What `given`, neither a stored matrix nor a generation job id, should have been:
        the matrix id it begins, else the job id it begins, else where ids are listed."""
        with self._read() as session:
            for table in (Matrix, GenerationJob):
                hint = _id_hint(session, given, table)
                if hint.startswith("a whole id"):  # a prefix of stored ids
                    return hint
            return _id_hint(session, given)

    def get_generation_job(self: StoreCore, job_id: str) -> JobRow:
        """One generation job with its run counts per status, its status as reads show it
        (`interrupted` once its driver's lease ran out); UnknownMatrix if there is none."""
        with self._read() as session:
            job = session.get(GenerationJob, job_id)
            if job is None:
                raise UnknownMatrix(f"no generation job {job_id!r} in {self.display_url}; "
                                    f"expected {_id_hint(session, job_id, GenerationJob)}")
            return _job_row(job, _status_counts(session, [job_id], Run.job_id)[job_id])

    def count_generation_jobs(self: StoreCore) -> int:
        """How many generation jobs the store holds."""
        with self._connect() as conn:
            return conn.execute(select(func.count()).select_from(GenerationJob)).scalar_one()

    def list_generation_jobs(
        self: StoreCore, limit: int | None = None, offset: int = 0
    ) -> list[JobRow]:
        """Generation jobs, newest first, with their run counts per status (`offset` skips
        the newest ones: pages of `limit`)."""
        with self._read() as session:
            stmt = (select(GenerationJob)
                    .order_by(GenerationJob.submitted_at.desc(), GenerationJob.id)
                    .limit(limit).offset(offset or None))
            jobs = session.scalars(stmt).all()
            counts = _status_counts(session, [j.id for j in jobs], Run.job_id)
            return [_job_row(j, counts[j.id]) for j in jobs]

    def list_matrices(
        self: StoreCore, limit: int | None = None, offset: int = 0,
        name_contains: str | None = None,
    ) -> list[MatrixRow]:
        """Matrices, newest first, with their run counts per status (`offset` skips the
        newest ones: pages of `limit`; `name_contains`: only those whose name holds it,
        case-insensitively)."""
        with self._read() as session:
            stmt = (select(Matrix).where(*_name_holds(name_contains))
                    .order_by(Matrix.submitted_at.desc(), Matrix.id)
                    .limit(limit).offset(offset or None))
            matrices = session.scalars(stmt).all()
            paged = limit is not None or offset or name_contains is not None
            counts = _status_counts(session, [m.id for m in matrices] if paged else None)
            return [_matrix_row(m, counts[m.id]) for m in matrices]

    def count_runs(self: StoreCore, **filters) -> int:
        """How many runs match the filters of `run_conditions`."""
        stmt = select(func.count()).select_from(Run).where(*run_conditions(**filters))
        with self._connect() as conn:
            return conn.execute(stmt).scalar_one()

    def newest_matrices(self: StoreCore, limit: int, **filters) -> list[str]:
        """Ids of the newest `limit` matrices holding runs that match the filters."""
        having = select(Run.matrix_id).where(*run_conditions(**filters)).distinct()
        stmt = (select(Matrix.id).where(Matrix.id.in_(having))
                .order_by(Matrix.submitted_at.desc(), Matrix.id).limit(limit))
        with self._connect() as conn:
            return list(conn.scalars(stmt))

    def stored_values(self: StoreCore, name: str, values: Sequence[str] | None = None
                      ) -> list[str]:
        """The distinct values stored runs hold in filter `name` (a `run_conditions` filter
        that compares one column: host, kind, model, prompt, specfleet_version...), sorted;
        with `values`, only those of them."""
        column = Host.kind if name == "kind" else _EQ_FILTERS[name]
        table = Host if name == "kind" else Run
        shown = read_run_status(utcnow()).label("status") if name == "status" else column
        stmt = select(shown).select_from(table).where(column.is_not(None)).distinct()
        if values is not None:
            stmt = stmt.where(_in(shown, list(values)))
        with self._connect() as conn:  # sorted here, bytewise as SQLite does: a PostgreSQL
            return sorted(conn.scalars(stmt))  # collation (en-US) puts 'Zeta' after 'alpha'

    def submitted_times(self: StoreCore, matrix_ids: Sequence[str]) -> dict[str, datetime]:
        """Submission time of each of these matrices (unknown ids are left out)."""
        stmt = select(Matrix.id, Matrix.submitted_at).where(Matrix.id.in_(list(matrix_ids)))
        with self._connect() as conn:
            return dict(conn.execute(stmt).all())

    def runs(self: StoreCore, limit: int | None = None, offset: int = 0,
             columns: Sequence[str] | None = None, newest: int | None = None,
             **filters) -> list:
        """Runs matching the filters of `run_conditions`, in matrix and plan order
        (`limit` and `offset`: one page of them) as `RunRow`s, or with `columns` (names of
        `RunRow` fields) as light rows of just those fields (`rows.run_fields_row`);
        `newest`: only the last N of them planned (the newest matrices' and jobs'), listed in
        the same order."""
        names = RUN_FIELDS if columns is None else tuple(dict.fromkeys(columns))
        now = utcnow()
        conditions = run_conditions(**filters)
        if newest is not None:  # ids grow as runs are planned
            conditions = [Run.id.in_(select(Run.id).where(*conditions)
                                     .order_by(Run.id.desc()).limit(newest))]
        stmt = (
            select(*(_selected(name, now) for name in names)).where(*conditions)
            # A generation job's runs (no matrix) first on both backends: PostgreSQL puts
            # NULL last by default, SQLite first.
            .order_by(Run.matrix_id.nulls_first(), Run.job_id, Run.plan_order, Run.id)
            .limit(limit).offset(offset or None)
        )
        row_type = RunRow if columns is None else run_fields_row(names)
        with self._connect() as conn:
            rows = conn.execute(stmt).all()
            _check_numbers(conn, stmt, rows, names)
            return [row_type(*row) for row in rows]

    def run_keys_beginning(self: StoreCore, prefix: str, most: int = 2) -> list[str]:
        """Up to `most` stored run keys that begin with `prefix` (`matrix status` shows 12
        characters of a key), in key order."""
        with self._read() as session:
            return _beginning(session, Run.run_key, prefix, most)

    def run_spec(self: StoreCore, run_key: str) -> RunSpec:
        """The RunSpec of a stored run, prompt text included (to run or replay it again).

        Raises:
            UnknownRun: no run with this key.
        """
        stmt = (
            select(Run, Prompt.text).join(Prompt, Prompt.text_hash == Run.prompt_hash)
            .where(Run.run_key == run_key)
        )
        with self._read() as session:
            found = session.execute(stmt).one_or_none()
            if found is None:
                raise UnknownRun(f"no run with key {run_key!r}")
            return run_spec(*found)

    def hosts(self: StoreCore, names: Sequence[str]) -> list[HostRow]:
        """The recorded hosts of these names (names never recorded are left out)."""
        stmt = select(*(getattr(Host, f.name) for f in fields(HostRow))).where(
            Host.name.in_(list(names)))
        with self._connect() as conn:
            return [HostRow(*row) for row in conn.execute(stmt)]

    def prompt_texts(self: StoreCore, hashes: Sequence[str]) -> dict[str, str]:
        """Prompt text by its sha256 (unknown hashes are left out)."""
        stmt = select(Prompt.text_hash, Prompt.text).where(Prompt.text_hash.in_(list(hashes)))
        with self._connect() as conn:
            return dict(conn.execute(stmt).all())

    def runs_not_done(
        self: StoreCore, matrix_id: str, statuses: Sequence[str] | None = None
    ) -> list[RunSpec]:
        """The runs of a matrix that are not `done`, in plan order, as RunSpecs.

        Args:
            matrix_id: the matrix.
            statuses: only runs in these statuses (default: every status but `done`).
        """
        StoreQueries.get_matrix(self, matrix_id)  # by class: a StoreCore does not list it
        wanted = Run.status.in_(list(statuses)) if statuses is not None else Run.status != "done"
        return _run_specs(self, Run.matrix_id == matrix_id, wanted)

    def pending_job_runs(self: StoreCore, job_id: str) -> list[RunSpec]:
        """The `pending` runs of a generation job, in the batch's order, as RunSpecs (what
        `job resume` sends once `claim_job` re-queued them)."""
        return _run_specs(self, Run.job_id == job_id, Run.status == "pending")


def _check_numbers(conn: Connection, stmt: Select, rows: Sequence[Any],
                   names: tuple[str, ...]) -> None:
    """Raise UnreadableValue for the first number column of `rows` (read by `stmt`) holding
    anything else, naming its run. One pass of C over the types of their values (~1% of
    reading whole rows); the run is looked up only once one is found."""
    at = [i for i, name in enumerate(names) if name in NUMBER_FIELDS]
    if not at:
        return
    values = map(itemgetter(*at), rows)  # a tuple per row, or one value for one column
    if set(map(type, chain.from_iterable(values) if len(at) > 1 else values)) <= NUMBER_TYPES:
        return
    index, column = next((i, c) for i, row in enumerate(rows) for c in at
                         if type(row[c]) not in NUMBER_TYPES)
    run_key = rows[index][names.index("run_key")] if "run_key" in names else (
        conn.execute(stmt.with_only_columns(Run.run_key)).all()[index][0])
    raise UnreadableValue.not_a_number(names[column], run_key, rows[index][column])


def _run_specs(store: StoreCore, *where) -> list[RunSpec]:
    """The runs matching `where`, in plan order, as RunSpecs with their prompts' text."""
    stmt = (select(Run, Prompt.text).join(Prompt, Prompt.text_hash == Run.prompt_hash)
            .where(*where).order_by(Run.plan_order))
    with store._read() as session:
        return [run_spec(run, text) for run, text in session.execute(stmt)]


MAX_ID_HINT_CHARS = 200  # matrix ids are ~30 characters; past this nothing begins so
ID_HINTS = 3  # the ids an ambiguous prefix names


def _id_hint(session: Session, given: str, table: type[Matrix | GenerationJob] = Matrix) -> str:
    """What an unknown matrix (or generation job) id should have been: a matrix id, not a
    generation job's (or the other way round), the one stored id it begins (a short prefix
    typed), else where the ids are listed."""
    if table is Matrix and session.get(GenerationJob, given) is not None:
        return "a matrix id, not a generation job's (`specfleet job show` reads it)"
    if table is GenerationJob and session.get(Matrix, given) is not None:
        return "a generation job id, not a matrix's (`specfleet matrix show` reads it)"
    prefix = given.strip()
    found = _beginning(session, table.id, prefix, ID_HINTS + 1)
    if len(found) == 1:
        return f"a whole id (did you mean {found[0]!r}?)"
    if found:  # a prefix of several: name them, not only where ids are listed
        named = ", ".join(repr(f) for f in found[:ID_HINTS])
        more = ", ..." if len(found) > ID_HINTS else ""
        return f"a whole id ({prefix!r} begins {named}{more})"
    lister = "matrix list" if table is Matrix else "job list"
    return f"an id that `specfleet {lister}` shows"


def _beginning(session: Session, column: InstrumentedAttribute, prefix: str,
               most: int) -> list[str]:
    """Up to `most` stored values of `column` that begin with `prefix`, in order."""
    if not 0 < len(prefix) <= MAX_ID_HINT_CHARS:  # SQLite refuses a LIKE pattern past ~50 KB
        return []
    return list(session.scalars(select(column).where(column.startswith(prefix, autoescape=True))
                                .order_by(column).limit(most)))


def _status_counts(session: Session, ids: list[str] | None,
                   owner: InstrumentedAttribute = Run.matrix_id) -> dict[str, dict[str, int]]:
    """Run counts per status of the given matrices (None: all of them), or of the given
    generation jobs with `owner=Run.job_id`."""
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    stmt = select(owner, Run.status, func.count()).group_by(owner, Run.status)
    if ids is not None:
        stmt = stmt.where(owner.in_(ids))
    for owner_id, status, n in session.execute(stmt):
        if owner_id is not None:  # a run belongs to a matrix or to a generation job
            counts[owner_id][status] = n
    return counts


def _status_read(status: str, lease_until: datetime | None,
                 counts: dict[str, int]) -> tuple[str, dict[str, int]]:
    """A matrix's or a job's status and run counts as reads show them."""
    counts = dict(counts)
    if reads_interrupted(status, lease_until, utcnow()):
        # Its driver stopped renewing the lease: what it had running is lost with it.
        status = "interrupted"
        lost = counts.pop("running", 0)
        if lost:
            counts["interrupted"] = counts.get("interrupted", 0) + lost
    return status, counts


def _job_row(job: GenerationJob, counts: dict[str, int]) -> JobRow:
    stored = {f.name: getattr(job, f.name) for f in fields(JobRow) if f.name != "counts"}
    stored["status"], stored["counts"] = _status_read(job.status, job.lease_until, counts)
    return JobRow(**stored)


def _matrix_row(matrix: Matrix, counts: dict[str, int]) -> MatrixRow:
    status, counts = _status_read(matrix.status, matrix.lease_until, counts)
    return MatrixRow(
        id=matrix.id, name=matrix.name, spec=matrix.spec, spec_hash=matrix.spec_hash,
        submitted_at=matrix.submitted_at, finished_at=matrix.finished_at, status=status,
        specfleet_version=matrix.specfleet_version, counts=counts,
        driver_id=matrix.driver_id, lease_until=matrix.lease_until,
    )
