"""Run ownership: which driver runs a matrix and its runs, vouched for by a heartbeat lease.

A driver (one `matrix run`, `resume`, `job generate` or `job resume` process) claims a
matrix (or creates or claims a generation job), marks each run it sends `running` under its
id, and renews the leases of all of them every `lease_s / 4` seconds. A resume claims only a
matrix or job whose lease expired (its driver died or lost the store for longer than the
lease) and takes only pending runs and runs whose lease expired; a matrix or job whose lease
expired reads `interrupted`, never `running` forever.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, case, func, not_, select, update
from sqlalchemy.orm import Session

from specfleet.settings import LEASE_S
from specfleet.store.base import StoreCore
from specfleet.store.errors import StoreConflict, UnknownMatrix
from specfleet.store.tables import GenerationJob, Matrix, Run
from specfleet.store.values import locked_run, utcnow


def new_driver_id() -> str:
    """An id unique to this process and call: `host:pid:random`."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass(frozen=True)
class Claim:
    """What `claim_matrix` got.

    Attributes:
        taken: the caller now owns the matrix.
        requeued: runs put back to `pending` (resume only).
        skipped: runs a live driver holds (all of them when `taken` is False).
        owner: the live driver that holds the matrix when `taken` is False.
        lease_until: that driver's lease (naive UTC).
    """

    taken: bool
    requeued: int = 0
    skipped: int = 0
    owner: str | None = None
    lease_until: datetime | None = None


def lease_live(driver_id: str | None, lease_until: datetime | None, now: datetime) -> bool:
    """A lease someone still holds."""
    return driver_id is not None and lease_until is not None and lease_until > now


def reads_interrupted(status: str, lease_until: datetime | None, now: datetime) -> bool:
    """A `running` matrix, generation job or run whose lease has run out: its driver is gone."""
    return status == "running" and (lease_until is None or lease_until <= now)


def read_run_status(now: datetime) -> ColumnElement[str]:
    """`runs.status` as every read shows it (SQL): a `running` run whose lease ran out reads
    `interrupted`, so a killed driver's runs never read `running` forever, resumed or not. A
    run marked running without a lease reads as stored."""
    expired = and_(Run.status == "running", Run.lease_until <= now)
    return case((expired, "interrupted"), else_=Run.status)


def _requeue(session: Session, owned: ColumnElement[bool], driver_id: str,
             now: datetime) -> tuple[int, int]:
    """Put the `owned` runs that are not done and that no other live driver holds back to
    `pending`.

    Returns:
        (how many were re-queued, how many a live driver holds).
    """
    held = and_(Run.status == "running", Run.driver_id != driver_id, Run.lease_until > now)
    skipped = session.scalar(select(func.count()).select_from(Run).where(owned, held))
    requeued = session.execute(
        update(Run).where(owned, Run.status != "done", not_(held))
        .values(status="pending", error=None, started_at=None, finished_at=None,
                driver_id=None, lease_until=None)
    ).rowcount  # type: ignore[attr-defined]  # an UPDATE gives a CursorResult
    return requeued, skipped or 0


def _claim(session: Session, owner: Matrix | GenerationJob, owned: ColumnElement[bool],
           driver_id: str, lease_s: float, requeue: bool) -> Claim:
    """Take a matrix or generation job (`owner`, locked) unless a live driver holds it; with
    `requeue`, put its `owned` runs that are not done and no live driver holds back to
    `pending`."""
    now = utcnow()
    if owner.status == "running" and owner.driver_id not in (None, driver_id) \
            and lease_live(owner.driver_id, owner.lease_until, now):
        left = session.scalar(select(func.count()).select_from(Run).where(
            owned, Run.status != "done"))
        return Claim(False, 0, left or 0, owner.driver_id, owner.lease_until)
    owner.driver_id, owner.lease_until = driver_id, now + timedelta(seconds=lease_s)
    owner.status, owner.finished_at = "running", None
    if not requeue:
        return Claim(True)
    return Claim(True, *_requeue(session, owned, driver_id, now))


class StoreLeases:
    """Ownership writes of `Store` (mixed in; what they use of it: `base.StoreCore`)."""

    def claim_matrix(self: StoreCore, matrix_id: str, driver_id: str, lease_s: float,
                     requeue: bool = False) -> Claim:
        """Take a matrix unless a live driver holds it; with `requeue`, put every run that
        is not done and not held by a live driver back to `pending`.

        Raises:
            UnknownMatrix: no such matrix.
        """
        with self._write() as session:
            matrix = session.get(Matrix, matrix_id, with_for_update=True)
            if matrix is None:
                raise UnknownMatrix(f"no matrix {matrix_id!r} in {self.display_url}")
            return _claim(session, matrix, Run.matrix_id == matrix_id, driver_id, lease_s,
                          requeue)

    def claim_job(self: StoreCore, job_id: str, driver_id: str, lease_s: float) -> Claim:
        """Take a generation job unless a live driver holds it (`job resume`), and put every
        run of it that is not done and not held by a live driver back to `pending`, as
        `claim_matrix(..., requeue=True)` does for a matrix.

        Raises:
            UnknownMatrix: no such job.
        """
        with self._write() as session:
            job = session.get(GenerationJob, job_id, with_for_update=True)
            if job is None:
                raise UnknownMatrix(f"no generation job {job_id!r} in {self.display_url}")
            return _claim(session, job, Run.job_id == job_id, driver_id, lease_s, requeue=True)

    def heartbeat(self: StoreCore, driver_id: str, lease_s: float) -> None:
        """Renew the leases of the driver's running matrices, generation jobs and runs."""
        until = utcnow() + timedelta(seconds=lease_s)
        with self._write() as session:
            for model in (Matrix, GenerationJob, Run):
                session.execute(update(model).where(
                    model.driver_id == driver_id, model.status == "running"
                ).values(lease_until=until))

    def mark_running(self: StoreCore, run_key: str, driver_id: str | None = None,
                     lease_s: float = LEASE_S.default_s) -> None:
        """Mark a run as started now by `driver_id`.

        Raises:
            StoreConflict: the run is done, a live driver runs it, or its matrix or job is
                now held by another driver (taken over after our lease ran out).
        """
        now = utcnow()
        with self._write() as session:
            run = locked_run(session, run_key)
            if run.status == "done":
                raise StoreConflict(f"run {run_key!r} is already done; it is never replayed")
            if run.status == "running" and run.driver_id != driver_id \
                    and lease_live(run.driver_id, run.lease_until, now):
                raise StoreConflict(f"run {run_key!r} is running under driver {run.driver_id}")
            until = now + timedelta(seconds=lease_s) if driver_id else None
            parent = (session.get(Matrix, run.matrix_id) if run.matrix_id is not None else
                      session.get(GenerationJob, run.job_id) if run.job_id is not None else None)
            if driver_id is not None and parent is not None:
                owner = parent.driver_id
                if owner not in (None, driver_id):  # a resume took it over after our lease
                    what = "matrix" if isinstance(parent, Matrix) else "generation job"
                    raise StoreConflict(f"{what} {parent.id!r} is now run by {owner}")
                if owner == driver_id and parent.status == "running":
                    # Its lease ends with its run's: else `matrix status` read the matrix
                    # interrupted and this run still running for the seconds between them.
                    parent.lease_until = until
            run.status, run.error, run.started_at = "running", None, now
            run.driver_id = driver_id
            run.lease_until = until

    def end_leases(self: StoreCore, driver_id: str) -> int:
        """End now the leases of a driver known to have stopped (it gave up on a store
        outage: `journal.Journal.note_stopped`), so `resume` need not wait them out.

        Returns:
            How many running matrices, generation jobs and runs it held.
        """
        now = utcnow()
        ended = 0
        with self._write() as session:
            for model in (Matrix, GenerationJob, Run):
                ended += session.execute(update(model).where(
                    model.driver_id == driver_id, model.status == "running",
                    model.lease_until > now,
                ).values(lease_until=now)).rowcount  # type: ignore[attr-defined]
        return ended

