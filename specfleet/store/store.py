"""The repository the scheduler and CLI call: `open_store()` and `Store`'s write methods.

Every method is one short transaction. On SQLite, writes begin with `BEGIN IMMEDIATE` (so a
second writer waits on the busy timeout instead of failing mid-transaction); on PostgreSQL
the run row is locked with `SELECT ... FOR UPDATE` before it is compared and written.
Reads live in `queries.py`; `Store` forwards to them.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import sqlite3
import sys
import traceback
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Connection, Engine, update
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

import specfleet
from specfleet.errors import one_line
from specfleet.jobs.run import RunResult, RunSpec, Target
from specfleet.settings import LEASE_S
from specfleet.store import values
from specfleet.store.dberrors import read_only_server, translate_error
from specfleet.store.engine import (
    WRITE_OPTION,
    check_readable,
    check_writable,
    create_private_file,
    display_url,
    make_engine,
    remove_empty_side_files,
    resolve_url,
    store_source,
)
from specfleet.store.errors import (
    StoreConflict,
    StoreDamaged,
    UnknownMatrix,
    UnreadableValue,
    damaged_value,
)
from specfleet.store.journal import Journal, WriteBack, check_journal_root
from specfleet.store.leases import StoreLeases
from specfleet.store.migrate import (
    check_known,
    check_readable_schema,
    current_revision,
    ensure_schema,
)
from specfleet.store.openedfile import OpenedFile
from specfleet.store.queries import StoreQueries
from specfleet.store.series import StoreSeries
from specfleet.store.sidefiles import remove_unfinished_store
from specfleet.store.tables import GenerationJob, Host, Matrix, Prompt, Run
from specfleet.store.values import utcnow

FINAL_MATRIX_STATUSES = ("done", "failed", "interrupted", "cancelled")



def _connection_errors() -> tuple[type[BaseException], ...]:
    """The errors a store's connection raises: psycopg's only once a PostgreSQL store loaded
    it (the `postgres` extra; importing it for every SQLite command cost ~60 ms)."""
    psycopg = sys.modules.get("psycopg")
    return (DBAPIError, sqlite3.Error, *((psycopg.Error,) if psycopg is not None else ()))


def open_store(url: str | None = None, *, read_only: bool = False,
               existing: bool = False) -> Store:
    """Open the store at `url` (else `SPECFLEET_DB`, else the default SQLite file).

    Creates or upgrades the schema on first use, then writes any results left in this
    store's journal (`journal.py`) by a driver that could not reach it.

    Args:
        url: `sqlite:///PATH`, `postgresql+psycopg://USER:PW@HOST:PORT/DB` or a file path.
        read_only: for read commands: never create, migrate or write; refuse a missing
            file, an empty database or another application's database in one line.
        existing: for a writing command about what is stored (`matrix resume`): refuse a
            missing SQLite file as a read does, rather than create an empty store.

    Returns:
        A ready `Store`; call `close()` when done.

    Raises:
        UserError: a bad scheme, unreachable server, bad credentials, a read-only or corrupted
            SQLite file, or a schema newer than this code (left untouched).
    """
    resolved, source = resolve_url(url, create_dir=not (read_only or existing)), store_source(url)
    if read_only or existing:
        check_readable(resolved, source)
    made = None
    if not read_only:
        check_writable_store(resolved, source)
        made = create_private_file(resolved, source)
    engine = make_engine(resolved, read_only=read_only)
    try:
        with connection_errors(resolved, source, engine, reading=read_only):
            if read_only:
                check_readable_schema(engine, resolved, source)
                return Store(engine, resolved, source)
            ensure_schema(engine, resolved, source)
    except BaseException:
        if made is not None:  # else it reads as an empty store, or one that is not specfleet's
            remove_unfinished_store(made)
        raise
    store = Store(engine, resolved, source)
    # Results a driver finished but could not store (an outage longer than its retries).
    store.written_back = Journal(resolved).write_back(store)
    return store


def check_store_before_fleet(url: str | None) -> None:
    """What a writing command checks of its store (`--db`, else `SPECFLEET_DB`, else the
    default file) before it connects a fleet: everything `open_store` refuses without a
    connection, creating no store. The store itself is opened once the fleet answers, so a
    fleet that is not there leaves no new empty store behind.

    Raises:
        UserError: as `check_writable_store`, a bad scheme or unparsable URL, or a PostgreSQL
            server that does not answer, refuses the credentials or takes no writes.
    """
    resolved, source = resolve_url(url), store_source(url)
    check_writable_store(resolved, source)
    if resolved.get_backend_name() == "postgresql":
        # One connection, nothing written: an unreachable server is said before the fleet
        # starts (~20 s on the embedded one), not after.
        engine = make_engine(resolved)
        with connection_errors(resolved, source, engine), engine.connect() as conn:
            read_only = conn.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
        engine.dispose()
        if read_only:  # a standby: else the first write fails once the fleet has started
            raise read_only_server(source, resolved, "transaction_read_only is on")


def check_writable_store(url: URL, source: str) -> None:
    """What a writing command needs of its store, checked before any work and creating
    nothing: a writable SQLite file (or folder for it), not another application's database,
    and a journal folder to keep its results in (`journal.py`).

    Raises:
        UserError: naming the path or variable and what is expected.
    """
    check_writable(url, source)
    check_journal_root()
    refuse_foreign_sqlite(url, source)


def refuse_foreign_sqlite(url: URL, source: str) -> None:
    """Look at an existing SQLite file read-only first: opening it for writing switches it to
    WAL, which would already change another application's file."""
    if url.get_backend_name() != "sqlite":
        return
    assert url.database is not None  # resolve_url refuses a SQLite URL without a file
    if not Path(url.database).is_file() or Path(url.database).stat().st_size == 0:
        return
    probe = make_engine(url, read_only=True)
    with connection_errors(url, source, probe, reading=True), probe.connect() as conn:
        check_known(current_revision(conn), conn, url, source)
    probe.dispose()


@contextlib.contextmanager
def connection_errors(url: URL, source: str, engine: Engine | None = None,
                      reading: bool = False) -> Iterator[None]:
    """Turn connection faults the user can fix into one-line UserErrors naming `source`
    (`--db` or `SPECFLEET_DB`, from `store_source`); `reading`: the block reads, so a fault
    there is said as a failed read."""
    try:
        yield
    except _connection_errors() as err:
        _close_refused(engine, url)
        if isinstance(err, IntegrityError | sqlite3.IntegrityError):
            raise  # a constraint the caller broke, never a connection problem
        user_error = translate_error(err, url, source, reading)
        if user_error is None:
            raise
        raise user_error from None
    except ValueError as err:  # a JSON, time or number column a hand edit left unreadable
        _close_refused(engine, url)
        if not _unreadable_value(err):
            raise
        raise damaged_value(source, display_url(url), one_line(str(err))) from None
    except BaseException:
        _close_refused(engine, url)
        raise


def _close_refused(engine: Engine | None, url: URL) -> None:
    """Close the engine of a store just refused, and the empty side files its read left: a
    refused read (a newer or malformed store) leaves the folder as it found it."""
    if engine is not None:
        engine.dispose()
        remove_empty_side_files(url)


def _unreadable_value(err: ValueError) -> bool:
    """Whether `err` was raised turning a stored value into Python (SQLAlchemy's result
    processors, the store's row checks), not by the code reading the rows."""
    if isinstance(err, UnreadableValue):
        return True
    return any(frame.name.endswith("_apply_processors") or "sqlalchemy/engine/_processors" in
               frame.filename for frame in traceback.extract_tb(err.__traceback__))


def new_matrix_id(name: str) -> str:
    """A short readable id: the name's slug and six hex digits (`demo-3fa9c2`)."""
    slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:24] or "matrix"
    return f"{slug}-{secrets.token_hex(3)}"


class Store(StoreQueries, StoreSeries, StoreLeases):
    """Writes and reads of one database; see the module docstring for transactions."""

    def __init__(self, engine: Engine, url: URL, source: str):
        self.engine = engine
        self.url = url
        self.source = source  # what named the store in messages: --db or SPECFLEET_DB
        self._write_engine = engine.execution_options(**{WRITE_OPTION: True})
        self._opened_file = OpenedFile.of(url)  # the SQLite file its connections write
        self.written_back = WriteBack()  # what open_store wrote back from the journal

    @property
    def display_url(self) -> str:
        return display_url(self.url)

    def damaged(self, what: str) -> StoreDamaged:
        """The one line for a value read from this store that specfleet did not write (a
        hand edit), found where it is used: `what` names it and why."""
        return damaged_value(self.source, self.display_url, what)

    def close(self) -> None:
        """Release every pooled connection, and the empty side files a SQLite read leaves."""
        self.engine.dispose()
        remove_empty_side_files(self.url)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[Session]:
        # A file made read-only (or a server gone) after opening is still the user's to fix.
        if self._opened_file is not None:
            self._opened_file.check_in_place(self.source)
        with (
            connection_errors(self.url, self.source),
            Session(self._write_engine, expire_on_commit=False) as session,
            session.begin(),
        ):
            yield session

    @contextlib.contextmanager
    def _read(self) -> Iterator[Session]:
        # Reads too: a server gone mid-command is one line (exit 2), never a traceback.
        with (
            connection_errors(self.url, self.source, reading=True),
            Session(self.engine) as session,
        ):
            yield session

    @contextlib.contextmanager
    def _connect(self) -> Iterator[Connection]:
        with (
            connection_errors(self.url, self.source, reading=True),
            self.engine.connect() as conn,
        ):
            yield conn

    # hosts ---------------------------------------------------------------------------------

    def upsert_host(self, info: dict) -> None:
        """Insert or refresh a host (keys: name, machine_id, kind, os, arch, chip, memory_gb,
        versions, selftest, read_gb_per_s); `first_seen_at` is kept, `last_seen_at` set to
        now, and a stored read bandwidth kept when the worker has not measured one yet."""
        if not info.get("name"):
            raise ValueError("upsert_host needs a non-empty 'name'")
        row = values.host_values(info, utcnow())
        kept = ("first_seen_at",) + (("read_gb_per_s",) if row["read_gb_per_s"] is None else ())
        with self._write() as session:
            values.upsert(session, Host, row, ["name"], exclude=kept)

    # matrices and jobs ---------------------------------------------------------------------

    def create_matrix(
        self, name: str, spec: dict, runs: list[RunSpec], matrix_id: str | None = None
    ) -> str:
        """Store a matrix and all its runs as `pending`, in plan order, in one transaction.

        Args:
            name: the matrix's name.
            spec: the submitted spec (JSON-able); its hash is stored beside it.
            runs: the planned runs in plan order; their run keys must be new.
            matrix_id: an id chosen by the caller (see `new_matrix_id`); generated if None.

        Returns:
            The matrix id.

        Raises:
            StoreConflict: a run key repeats or already exists; nothing is written.
        """
        matrix_id = matrix_id or new_matrix_id(name)
        now = utcnow()
        matrix = Matrix(
            id=matrix_id, name=name, spec=spec, spec_hash=values.json_hash(spec),
            submitted_at=now, status="running", specfleet_version=specfleet.__version__,
            # Reads `running` until a driver claims it, `interrupted` if none ever does.
            lease_until=now + timedelta(seconds=LEASE_S.read()),
        )
        self._insert_planned(matrix, runs, now, matrix_id=matrix_id)
        return matrix_id

    def create_generation_job(
        self, name: str, target: Target, model: str, runs: list[RunSpec],
        params: dict | None = None, job_id: str | None = None, driver_id: str | None = None,
        lease_s: float | None = None,
    ) -> str:
        """Store a batch of prompts run on one target, with its runs `pending`.

        Args:
            driver_id: the driver that runs it; its heartbeat renews the job's lease.
            lease_s: the job's first lease (default: `SPECFLEET_LEASE_S`); the job reads
                `interrupted` once its lease runs out.

        Returns:
            The job id (runs point at it through `job_id`).
        """
        job_id = job_id or new_matrix_id(f"gen-{name}")
        now = utcnow()
        lease = timedelta(seconds=LEASE_S.read() if lease_s is None else lease_s)
        job = GenerationJob(
            id=job_id, name=name, host=target.host, engine=target.engine, device=target.device,
            model=model, params=params or {}, submitted_at=now, status="running",
            specfleet_version=specfleet.__version__, driver_id=driver_id, lease_until=now + lease,
        )
        self._insert_planned(job, runs, now, job_id=job_id)
        return job_id

    def _insert_planned(self, parent, runs: list[RunSpec], now: datetime, **link) -> None:
        keys = [r.run_key for r in runs]
        if len(set(keys)) != len(keys):
            dup = next(k for k in keys if keys.count(k) > 1)
            raise StoreConflict(f"run key {dup!r} appears twice in one plan")
        try:
            with self._write() as session:
                if session.get(type(parent), parent.id) is not None:
                    raise StoreConflict(f"id {parent.id!r} already exists")
                session.add(parent)
                session.flush()
                values.check_new_keys(session, keys)
                prompts = {values.text_hash(r.prompt_text): r.prompt_text for r in runs}
                values.insert_ignore(
                    session, Prompt, [{"text_hash": h, "text": t} for h, t in prompts.items()]
                )
                rows = [values.planned_run(r, i, now, **link) for i, r in enumerate(runs)]
                values.bulk_insert(session, Run, rows)
        except IntegrityError as err:
            raise StoreConflict(f"plan not stored: {str(err.orig).splitlines()[0]}") from None

    def finish_matrix(self, matrix_id: str, status: str, driver_id: str | None = None) -> bool:
        """Set a matrix's final status (done, failed, interrupted, cancelled) and finish time.

        With `driver_id`, only while that driver still holds the matrix (another driver's
        resume may have taken it over after our lease ran out). A matrix `interrupted` by its
        driver also settles, in the same transaction, every run that driver still has
        `running`: a stop signal can land between marking a run running and tracking it (or
        between fetching its result and storing it), and no run may stay `running` after.

        Returns:
            Whether the status was set.
        """
        return self._finish(Matrix, matrix_id, status, driver_id)

    def finish_generation_job(self, job_id: str, status: str,
                              driver_id: str | None = None) -> bool:
        """Set a generation job's final status and finish time; a job `interrupted` settles
        its still-`running` runs in the same transaction, as a matrix does (else they read
        `running` until their lease ran out). With `driver_id`, as `finish_matrix`: only
        while that driver holds the job, and only its runs are settled.

        Returns:
            Whether the status was set.
        """
        return self._finish(GenerationJob, job_id, status, driver_id)

    def _finish(self, model, ident: str, status: str, driver_id: str | None = None) -> bool:
        if status not in FINAL_MATRIX_STATUSES:
            raise ValueError(f"status must be one of {FINAL_MATRIX_STATUSES}, not {status!r}")
        with self._write() as session:
            row = session.get(model, ident, with_for_update=True)
            if row is None:
                raise UnknownMatrix(f"no matrix or job {ident!r} in {self.display_url}")
            owner = row.driver_id  # matrices and jobs both have one (0004, 0008)
            if driver_id is not None and owner not in (None, driver_id):
                return False
            row.status, row.finished_at, row.lease_until = status, utcnow(), None
            if status == "interrupted" and (model is GenerationJob or driver_id is not None):
                self._interrupt_runs_of(session, model, ident, driver_id)
            return True

    @staticmethod
    def _interrupt_runs_of(session: Session, model, ident: str, driver_id: str | None) -> None:
        """The still-`running` runs of a matrix or job its driver stopped (of `driver_id`'s,
        when given) become `interrupted`."""
        owner = Run.matrix_id if model is Matrix else Run.job_id
        mine = [] if driver_id is None else [Run.driver_id == driver_id]
        session.execute(
            update(Run)
            .where(owner == ident, Run.status == "running", *mine)
            .values(status="interrupted", error="driver stopped", finished_at=utcnow(),
                    lease_until=None))

    def requeue(self, matrix_id: str) -> int:
        """Put every run of the matrix that is not `done` back to `pending`.

        Returns:
            How many runs were re-queued.
        """
        with self._write() as session:
            matrix = session.get(Matrix, matrix_id, with_for_update=True)
            if matrix is None:
                raise UnknownMatrix(f"no matrix {matrix_id!r} in {self.display_url}")
            matrix.status, matrix.finished_at = "running", None
            matrix.lease_until = utcnow() + timedelta(seconds=LEASE_S.read())
            result = session.execute(
                update(Run)
                .where(Run.matrix_id == matrix_id, Run.status != "done")
                .values(status="pending", error=None, started_at=None, finished_at=None)
            )
            return result.rowcount  # type: ignore[attr-defined]  # an UPDATE gives a CursorResult

    # runs ----------------------------------------------------------------------------------

    def record_result(self, result: RunResult) -> bool:
        """Write a run's result; an identical second write is a no-op.

        Returns:
            True when written, False when the identical result was already there.

        Raises:
            UnknownRun: the run key was never planned.
            StoreConflict: the run is `done` with a different result, or the result comes
                from another target than planned.
        """
        digest = values.result_hash(result)
        with self._write() as session:
            run = values.locked_run(session, result.run_key)
            if run.status == "done":
                if run.result_hash == digest:
                    return False
                raise StoreConflict(f"run {result.run_key!r} is done with a different result")
            planned = (run.host, run.engine, run.device)
            got = (result.target.host, result.target.engine, result.target.device)
            if planned != got:
                raise StoreConflict(
                    f"run {result.run_key!r} was planned on {'/'.join(planned)}, "
                    f"result came from {'/'.join(got)}"
                )
            values.apply_result(run, result, digest, utcnow())
            return True

    def mark_interrupted(self, run_key: str, reason: str) -> None:
        """Mark a run interrupted (lost worker); a `done` run is left as it is."""
        self._settle(run_key, "interrupted", reason)

    def mark_failed(self, run_key: str, error: str) -> None:
        """Mark a run failed with its error; a `done` run is left as it is."""
        self._settle(run_key, "failed", error)

    def _settle(self, run_key: str, status: str, error: str) -> None:
        with self._write() as session:
            run = values.locked_run(session, run_key)
            if run.status == "done":
                return
            run.status, run.error, run.finished_at = status, error, utcnow()
            run.lease_until = None
