"""Dispatch a matrix's runs to the fleet: one timed run at a time per physical machine.

Each host gets its own queue (the plan's order). A run is marked `running` in the store
before it is sent and its result is stored the moment it returns. A run whose worker is lost
becomes `interrupted` (never replayed here; `resume` re-queues it on the user's word), a run
that raises inside the worker becomes `failed` with its error, and the other hosts go on.
A host that lost a run is `suspect` and gets nothing new until it answers a ping again.
Every Ray call has a timeout.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import ray
from ray.exceptions import (
    GetTimeoutError,
    NodeDiedError,
    ObjectLostError,
    OwnerDiedError,
    RayActorError,
    RayTaskError,
    WorkerCrashedError,
)

from specfleet.cluster import locks
from specfleet.cluster.progress import HostProgress, ProgressCallback, ProgressEvent, fan_out
from specfleet.jobs.run import RunResult, RunSpec

# Errors that mean "the worker (or its node) went away": the run's fate is unknown.
WORKER_LOST = (RayActorError, NodeDiedError, ObjectLostError, OwnerDiedError, WorkerCrashedError)


@dataclass(frozen=True)
class SchedulerOptions:
    """Timeouts and switches of one scheduler call (seconds)."""

    run_timeout_s: float = 3600.0  # one run longer than this is cancelled and `interrupted`
    call_timeout_s: float = 10.0  # ping, lock and fetching a ready result
    poll_s: float = 0.25  # longest wait for a result before looking at locks and health
    ping_every_s: float = 1.0  # how often a suspect host is pinged
    suspect_grace_s: float = 15.0  # how long runs wait for a suspect host before we stop
    lease_s: float = 120.0  # machine lease; renewed while a run is in flight
    progress: bool = True  # rich progress bars on stderr


@dataclass(frozen=True)
class HostTally:
    """What happened on one host during one scheduler call."""

    done: int
    failed: int
    interrupted: int
    pending: int
    run_s: float  # sum of the runs' own total_s
    health: str


@dataclass(frozen=True)
class MatrixOutcome:
    """The result of `run_matrix` / `resume`.

    Attributes:
        matrix_id: the matrix.
        status: "done" when every run of the matrix is done, "incomplete" otherwise.
        done, failed, interrupted: runs settled this call, by status.
        pending: runs left unsent (their host was lost or has no worker).
        wall_s: wall time of the call.
        hosts: per-host tallies.
    """

    matrix_id: str
    status: str
    done: int
    failed: int
    interrupted: int
    pending: int
    wall_s: float
    hosts: dict[str, HostTally]


@dataclass
class _InFlight:
    spec: RunSpec
    ref: Any
    sent_at: float


@dataclass
class _Host:
    name: str
    worker: Any
    machine: str
    queue: deque[RunSpec]
    total: int
    health: str = "healthy"
    inflight: _InFlight | None = None
    suspect_since: float = 0.0
    ping_ref: Any = None
    ping_at: float = 0.0
    done: int = 0
    failed: int = 0
    interrupted: int = 0
    run_s: float = 0.0

    def tally(self) -> HostTally:
        return HostTally(
            self.done, self.failed, self.interrupted, len(self.queue), self.run_s, self.health
        )


@dataclass
class _Ctx:
    store: Any
    matrix_id: str
    hosts: dict[str, _Host]
    opts: SchedulerOptions
    notify: ProgressCallback
    owner: str
    job_id: str | None
    lock: Any
    busy_machines: set[str] = field(default_factory=set)
    renewed_at: float = 0.0


def run_matrix(
    store,
    matrix_id: str,
    workers: dict[str, Any],
    on_progress: ProgressCallback | None = None,
    *,
    options: SchedulerOptions | None = None,
    machines: dict[str, str] | None = None,
) -> MatrixOutcome:
    """Run every `pending` run of a matrix on the fleet and store each result as it returns.

    Args:
        store: an open `Store`.
        matrix_id: the matrix (already created with its runs `pending`).
        workers: host name -> worker ActorHandle; runs of hosts not in it stay pending.
        on_progress: called with a `ProgressEvent` on every change (tests, other UIs).
        options: timeouts and the progress switch.
        machines: host name -> physical machine key, for hosts sharing one machine
            (default: each host is its own machine).

    Returns:
        The `MatrixOutcome`; the matrix is finished in the store as its `status`.
    """
    opts = options or SchedulerOptions()
    started = time.monotonic()
    runs = _pending_runs(store, matrix_id)
    hosts = _make_hosts(runs, workers, machines or {})
    totals = {name: h.total for name, h in hosts.items()}
    with HostProgress(totals, enabled=opts.progress) as bars:
        ctx = _Ctx(
            store=store,
            matrix_id=matrix_id,
            hosts=hosts,
            opts=opts,
            notify=fan_out([bars.update, on_progress]),
            owner=locks.new_owner(matrix_id),
            job_id=locks.current_job_id(),
            lock=locks.lock_actor(),
        )
        try:
            _loop(ctx)
        finally:
            _release_all(ctx)
    return _finish(store, matrix_id, hosts, time.monotonic() - started)


def resume(
    store,
    matrix_id: str,
    workers: dict[str, Any],
    on_progress: ProgressCallback | None = None,
    *,
    options: SchedulerOptions | None = None,
    machines: dict[str, str] | None = None,
) -> MatrixOutcome:
    """Re-queue every run of the matrix that is not `done`, then run them.

    Args and Returns: as `run_matrix`. Results already stored are kept as they are.
    """
    store.requeue(matrix_id)
    return run_matrix(
        store, matrix_id, workers, on_progress, options=options, machines=machines
    )


def _pending_runs(store, matrix_id: str) -> list[RunSpec]:
    # Only `pending`: interrupted and failed runs wait for an explicit `resume`.
    return store.runs_not_done(matrix_id, statuses=("pending",))


def _make_hosts(
    runs: list[RunSpec], workers: dict[str, Any], machines: dict[str, str]
) -> dict[str, _Host]:
    hosts: dict[str, _Host] = {}
    for spec in runs:
        name = spec.target.host
        if name not in hosts:
            machine = machines.get(name, name)
            hosts[name] = _Host(name, workers.get(name), machine, deque(), 0)
        hosts[name].queue.append(spec)
        hosts[name].total += 1
    for host in hosts.values():
        if host.worker is None:
            host.health = "dead"  # no worker on this host: its runs stay pending
    return hosts


def _loop(ctx: _Ctx) -> None:
    while True:
        for host in ctx.hosts.values():
            _check_health(ctx, host)
            _maybe_dispatch(ctx, host)
        refs = [h.inflight.ref for h in ctx.hosts.values() if h.inflight is not None]
        if not refs:
            if _nothing_left(ctx):
                return
            time.sleep(min(ctx.opts.poll_s, 0.05))  # waiting for a lock or a suspect host
            continue
        ready, _ = ray.wait(refs, num_returns=1, timeout=ctx.opts.poll_s)
        for host in ctx.hosts.values():
            if host.inflight is not None and host.inflight.ref in ready:
                _settle(ctx, host)
        _check_timeouts(ctx)
        _renew_leases(ctx)


def _nothing_left(ctx: _Ctx) -> bool:
    now = time.monotonic()
    for host in ctx.hosts.values():
        if not host.queue:
            continue
        if host.health == "healthy":
            return False
        if host.health == "suspect" and now - host.suspect_since < ctx.opts.suspect_grace_s:
            return False
    return True


def _maybe_dispatch(ctx: _Ctx, host: _Host) -> None:
    if host.health != "healthy" or host.inflight is not None or not host.queue:
        return
    if host.machine in ctx.busy_machines or not _acquire(ctx, host.machine):
        return
    spec = host.queue.popleft()
    ctx.store.mark_running(spec.run_key)
    ctx.busy_machines.add(host.machine)
    host.inflight = _InFlight(spec, host.worker.run.remote(spec), time.monotonic())
    _emit(ctx, host, spec.run_key, "running")


def _settle(ctx: _Ctx, host: _Host) -> None:
    flight = host.inflight
    assert flight is not None
    host.inflight = None
    try:
        result = ray.get(flight.ref, timeout=ctx.opts.call_timeout_s)
    except WORKER_LOST as err:
        _interrupt(ctx, host, flight.spec, f"worker lost: {_one_line(err)}")
        _mark_suspect(host)  # a detached worker with max_restarts=-1 may come back
    except RayTaskError as err:
        _fail(ctx, host, flight.spec, _task_error(err))
    except GetTimeoutError:
        _interrupt(ctx, host, flight.spec, "result not fetched in time")
        _mark_suspect(host)
    else:
        _store_result(ctx, host, flight.spec, result)
    finally:
        _release(ctx, host.machine)


def _store_result(ctx: _Ctx, host: _Host, spec: RunSpec, result: RunResult) -> None:
    if result.status == "failed":
        _fail(ctx, host, spec, result.error or "failed without an error message")
        return
    ctx.store.record_result(result)
    if result.status == "done":
        host.done += 1
        host.run_s += result.total_s
    else:
        host.interrupted += 1  # e.g. cancelled cooperatively by the worker
    _emit(ctx, host, spec.run_key, result.status)


def _fail(ctx: _Ctx, host: _Host, spec: RunSpec, error: str) -> None:
    ctx.store.mark_failed(spec.run_key, error)
    host.failed += 1
    _emit(ctx, host, spec.run_key, "failed")


def _interrupt(ctx: _Ctx, host: _Host, spec: RunSpec, reason: str) -> None:
    ctx.store.mark_interrupted(spec.run_key, reason)
    host.interrupted += 1
    _emit(ctx, host, spec.run_key, "interrupted")


def _mark_suspect(host: _Host) -> None:
    host.health = "suspect"
    host.suspect_since = time.monotonic()
    host.ping_ref = None


def _check_timeouts(ctx: _Ctx) -> None:
    now = time.monotonic()
    for host in ctx.hosts.values():
        flight = host.inflight
        if flight is None or now - flight.sent_at < ctx.opts.run_timeout_s:
            continue
        host.inflight = None
        limit = ctx.opts.run_timeout_s
        _interrupt(ctx, host, flight.spec, f"timed out after {limit:.0f} s; cancelled")
        _cancel_quietly(host)
        _mark_suspect(host)
        _release(ctx, host.machine)


def _check_health(ctx: _Ctx, host: _Host) -> None:
    """Ping a suspect host now and then; an answer makes it healthy again."""
    if host.health != "suspect":
        return
    now = time.monotonic()
    if host.ping_ref is None:
        if now - host.ping_at >= ctx.opts.ping_every_s:
            host.ping_ref, host.ping_at = host.worker.ping.remote(), now
        return
    ready, _ = ray.wait([host.ping_ref], timeout=0)
    if ready:
        try:
            ray.get(host.ping_ref, timeout=ctx.opts.call_timeout_s)
            host.health = "healthy"
        except (*WORKER_LOST, RayTaskError, GetTimeoutError):
            pass
        host.ping_ref = None
    elif now - host.ping_at > ctx.opts.call_timeout_s:
        host.ping_ref = None  # unanswered (actor restarting): ask again later


def _acquire(ctx: _Ctx, machine: str) -> bool:
    ref = ctx.lock.acquire.remote(machine, ctx.owner, ctx.job_id, ctx.opts.lease_s)
    try:
        return bool(ray.get(ref, timeout=ctx.opts.call_timeout_s))
    except (*WORKER_LOST, GetTimeoutError):
        return False  # the lock actor is restarting: try again on the next pass


def _release(ctx: _Ctx, machine: str) -> None:
    ctx.busy_machines.discard(machine)
    try:
        ray.get(ctx.lock.release.remote(machine, ctx.owner), timeout=ctx.opts.call_timeout_s)
    except (*WORKER_LOST, GetTimeoutError):
        pass  # the lease expires on its own


def _release_all(ctx: _Ctx) -> None:
    for machine in list(ctx.busy_machines):
        _release(ctx, machine)


def _renew_leases(ctx: _Ctx) -> None:
    now = time.monotonic()
    if now - ctx.renewed_at < ctx.opts.lease_s / 4:
        return
    ctx.renewed_at = now
    for machine in ctx.busy_machines:
        _acquire(ctx, machine)


def _cancel_quietly(host: _Host) -> None:
    # Control group: answered even while a run is going; best effort, the host is suspect.
    with contextlib.suppress(Exception):
        host.worker.cancel.remote()


def _emit(ctx: _Ctx, host: _Host, run_key: str, status: str) -> None:
    failed = host.failed + host.interrupted
    event = ProgressEvent(host.name, run_key, status, host.done, failed, host.total, host.health)
    ctx.notify(event)


def _finish(store, matrix_id: str, hosts: dict[str, _Host], wall_s: float) -> MatrixOutcome:
    tallies = {name: host.tally() for name, host in hosts.items()}
    left = store.runs_not_done(matrix_id)
    status = "done" if not left else "incomplete"
    store.finish_matrix(matrix_id, status)
    return MatrixOutcome(
        matrix_id=matrix_id,
        status=status,
        done=sum(t.done for t in tallies.values()),
        failed=sum(t.failed for t in tallies.values()),
        interrupted=sum(t.interrupted for t in tallies.values()),
        pending=sum(t.pending for t in tallies.values()),
        wall_s=wall_s,
        hosts=tallies,
    )


def _task_error(err: RayTaskError) -> str:
    cause = getattr(err, "cause", None)
    if cause is not None:
        return _one_line(f"{type(cause).__name__}: {cause}")
    return _one_line(err)


def _one_line(err: object, limit: int = 500) -> str:
    text = " ".join(str(err).split())
    return text[:limit]
