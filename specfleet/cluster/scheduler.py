"""Dispatch a matrix's runs to the fleet: one timed run at a time per physical machine.

Each host gets its own queue (the plan's order). A run is marked `running` in the store
before it is sent and its result is stored the moment it returns. A run whose worker is lost
becomes `interrupted` (never replayed here; `matrix resume` re-queues it on the user's word), a run
that fails inside the worker becomes `failed` with its error, and the other hosts go on.
A host that lost a run is `suspect` and gets nothing new until it answers a ping again.

A host is followed on specfleet's own terms while it runs one of ours (`hostwatch.py`: pings,
unreachable, back and settling, a kept result claimed); a host away keeps its queue waiting up
to `host_wait_s`, then its runs stay `pending` for `matrix resume`.
Every Ray call has a timeout. Machine leases (`locks.py`) keep two drivers apart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import ray

from specfleet.cluster import hostwatch, locks
from specfleet.cluster.fleet import DEAD, HEALTHY
from specfleet.cluster.hoststate import HostState, HostTally, InFlight, store_load_samples
from specfleet.cluster.outcome import MatrixOutcome, RunInterrupted, finish_matrix, finish_stopped
from specfleet.cluster.progress import (
    HOST_NEWS,
    ProgressCallback,
    ProgressEvent,
    busy_worker_reason,
    fan_out,
    machine_wait_reason,
    owner_kind,
    progress_for,
    resumed_by,
    run_words,
    store_waiting,
)
from specfleet.cluster.storewriter import StoreOutage, StoreWriter
from specfleet.engine.config import needs_costs
from specfleet.jobs.run import RunResult, RunSpec
from specfleet.settings import LEASE_S, STORE_RETRY_S
from specfleet.store.errors import StoreConflict
from specfleet.store.leases import new_driver_id
from specfleet.workers.costs import with_stored_costs

__all__ = [
    "HostTally",
    "MatrixOutcome",
    "RunInterrupted",
    "SchedulerOptions",
    "dispatch_runs",
    "run_matrix",
]


@dataclass(frozen=True)
class SchedulerOptions:
    """Timeouts and switches of one scheduler call (seconds)."""

    run_timeout_s: float = 3600.0  # one run longer than this is cancelled and `interrupted`
    call_timeout_s: float = 10.0  # ping, lock, quiet check and fetching a ready result
    poll_s: float = 0.25  # longest wait for a result before looking at locks and health
    ping_every_s: float = 1.0  # how often a host running ours, or away, is pinged
    # A worker that answers no ping this long while it runs ours: the host is unreachable and
    # the run interrupted. Pings go to the control group, so a slow run still answers them.
    unreachable_after_s: float = 8.0
    host_wait_s: float = 120.0  # how long queued runs wait for a host away (`--wait`)
    # A host back from unreachable, still with the same worker process, gets its next run
    # after as long again as it was away (at most this): Ray's own health checks may sit in
    # TCP retransmission back-off about that long after the link returns, and still declare
    # the node dead, which would lose a run sent there (seen: dead 16 s after a 40 s cut).
    settle_max_s: float = 60.0
    lease_s: float = 120.0  # machine lease; renewed while a run is in flight
    store_lease_s: float | None = None  # run ownership lease (None: SPECFLEET_LEASE_S or 60 s)
    # How long a store write retries an unreachable store (None: SPECFLEET_STORE_RETRY_S, 300 s unset).
    store_retry_s: float | None = None
    require_quiet: bool = False  # wait for a quiet, unthrottled host before each run
    quiet_wait_s: float = 120.0  # then run anyway, saying so (the result is flagged)
    progress: bool = True  # rich progress bars on stderr


@dataclass
class _Ctx:
    store: Any
    hosts: dict[str, HostState]
    opts: SchedulerOptions
    notify: ProgressCallback
    leases: locks.Leases | None
    writer: StoreWriter
    busy_machines: set[str] = field(default_factory=set)  # a run of ours is in flight there
    name_hosts: bool = False  # runs on more than one host: progress lines name the host
    name_models: bool = False  # more than one model: progress lines name the model


def run_matrix(
    store,
    matrix_id: str,
    workers: dict[str, Any],
    on_progress: ProgressCallback | None = None,
    *,
    options: SchedulerOptions | None = None,
    machines: dict[str, str] | None = None,
    suspect: Iterable[str] = (),
    requeue: bool = False,
) -> MatrixOutcome:
    """Take the matrix, run every `pending` run and store each result as it returns.

    A matrix a live driver still holds (its heartbeat lease has not run out) is left
    alone: the outcome then has `owner` set and `skipped` runs.

    Args:
        store: an open `Store`.
        matrix_id: the matrix (created with its runs `pending`).
        workers: host name -> worker ActorHandle; runs of hosts not in it stay pending.
        on_progress: called with a `ProgressEvent` on every change (tests, other UIs).
        options: timeouts and switches.
        machines: host name -> physical machine key, for hosts sharing one machine
            (default: each host is its own machine).
        suspect: hosts that start `suspect` (node gone now): their runs wait for them up to
            `options.host_wait_s`.
        requeue: `matrix resume`: first re-queue every run not `done` that no live driver
            holds (interrupted and failed ones too); results already stored are kept as
            they are. False leaves interrupted and failed runs alone.

    Returns:
        The `MatrixOutcome`; the matrix is finished in the store with its `status`.
    """
    started = time.monotonic()
    opts = options or SchedulerOptions()
    driver_id = new_driver_id()
    # The claim too: Ctrl-C while it waits for another command's SQLite write lock left the
    # matrix `running` (a dead driver's lease for `resume` to wait out) and no resume line.
    try:
        claim = store.claim_matrix(matrix_id, driver_id, _lease_s(opts), requeue=requeue)
        if not claim.taken:  # a live driver runs it: take nothing, say so
            return MatrixOutcome(matrix_id, "running", 0, 0, 0, 0, time.monotonic() - started,
                                 {}, skipped=claim.skipped, owner=claim.owner)
        pending = {row.run_key for row in store.runs(matrix=matrix_id, status="pending")}
        runs = [spec for spec in store.runs_not_done(matrix_id) if spec.run_key in pending]
        tallies = dispatch_runs(store, runs, workers, on_progress, options=opts,
                                machines=machines, owner=matrix_id, suspect=suspect,
                                driver_id=driver_id)
        # The last writes too: a Ctrl-C there (the load samples waiting for another
        # command's SQLite write) left the matrix `running` under a lease nobody renews.
        outcome = _last_writes(store, matrix_id, workers, tallies, opts, driver_id,
                               on_progress, started)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: in-flight runs are marked interrupted
        raise RunInterrupted(matrix_id, finish_stopped(store, matrix_id, driver_id),
                             _lease_s(opts)) from None
    return dataclasses.replace(outcome, skipped=claim.skipped)


def _last_writes(store, matrix_id: str, workers: dict[str, Any],
                 tallies: dict[str, HostTally], opts: SchedulerOptions, driver_id: str,
                 on_progress: ProgressCallback | None, started: float) -> MatrixOutcome:
    """The hosts' load samples and the matrix's final status, stored; they wait out a store
    outage like every result write did."""
    healthy = {h: workers[h] for h, t in tallies.items() if t.health == "healthy"}
    writer = StoreWriter(store, driver_id, _lease_s(opts), _store_retry_s(opts),
                         store_waiting(on_progress or (lambda event: None)))
    try:
        store_load_samples(store, matrix_id, healthy, opts.call_timeout_s, writer.retry)
        return finish_matrix(writer, matrix_id, tallies, time.monotonic() - started,
                             driver_id)
    except StoreOutage:
        writer.note_stopped()
        raise


def _lease_s(opts: SchedulerOptions) -> float:
    return opts.store_lease_s if opts.store_lease_s is not None else LEASE_S.read()


def _store_retry_s(opts: SchedulerOptions) -> float:
    return opts.store_retry_s if opts.store_retry_s is not None else STORE_RETRY_S.read()


def dispatch_runs(
    store,
    runs: Iterable[RunSpec],
    workers: dict[str, Any],
    on_progress: ProgressCallback | None = None,
    *,
    options: SchedulerOptions | None = None,
    machines: dict[str, str] | None = None,
    owner: str = "runs",
    suspect: Iterable[str] = (),
    driver_id: str | None = None,
) -> dict[str, HostTally]:
    """Send planned runs (already stored `pending`) to their hosts' workers; store results.

    Args:
        store: an open `Store` holding the runs.
        runs: the runs, in the order each host should run them.
        workers, on_progress, options, machines, suspect: as `run_matrix`.
        owner: a label for the machine leases (the matrix or job id); a driver waiting for
            a machine this call holds is told `matrix <owner>` (`job <owner>`), this pid and
            host.
        driver_id: this driver's id in the store (default: a new one).

    Returns:
        Host name -> what happened there.
    """
    opts = options or SchedulerOptions()
    hosts = _make_hosts(runs, workers, machines or {}, set(suspect))
    bars, lines = progress_for({n: h.total for n, h in hosts.items()}, opts.progress)
    with bars:
        notify = fan_out([bars.update, lines.update if lines else None, on_progress])
        writer = StoreWriter(store, driver_id or new_driver_id(), _lease_s(opts),
                             _store_retry_s(opts), store_waiting(notify))
        ctx = _Ctx(
            store=store,
            hosts=hosts,
            opts=opts,
            notify=notify,
            leases=_leases(owner, opts, hosts) if hosts else None,
            name_hosts=len(hosts) > 1,
            name_models=len({s.model for h in hosts.values() for s in h.queue}) > 1,
            writer=writer,
        )
        try:
            _loop(ctx)
        except BaseException as err:  # Ctrl-C or a store fault: runs in flight are lost to us
            why = ("interrupted (Ctrl-C or SIGTERM)" if isinstance(err, KeyboardInterrupt)
                   else type(err).__name__)  # entry.main turns SIGTERM into KeyboardInterrupt
            _abandon(ctx, f"driver stopped: {why}")
            if isinstance(err, StoreOutage):
                ctx.writer.note_stopped()
            raise
        finally:
            if ctx.leases is not None:
                ctx.leases.release_all()
    return {name: host.tally() for name, host in hosts.items()}


def _abandon(ctx: _Ctx, reason: str) -> None:
    """Cancel every run in flight, then mark each `interrupted` (best effort). All are
    cancelled first: a mark may wait for another command's SQLite write, and a second Ctrl-C
    there must not leave the other hosts running ours."""
    lost = [(host, host.inflight.spec.run_key) for host in ctx.hosts.values()
            if host.inflight is not None and host.inflight.cut_at is None]
    for host, _ in lost:
        host.cancel_quietly()
    for _, run_key in lost:
        with contextlib.suppress(Exception):
            ctx.store.mark_interrupted(run_key, reason)


def _make_hosts(
    runs: Iterable[RunSpec], workers: dict[str, Any], machines: dict[str, str],
    suspect: set[str],
) -> dict[str, HostState]:
    hosts: dict[str, HostState] = {}
    for spec in runs:
        name = spec.target.host
        if name not in hosts:
            hosts[name] = HostState(name, workers.get(name), machines.get(name, name), deque())
        hosts[name].queue.append(spec)
        hosts[name].total += 1
    for host in hosts.values():
        if host.worker is None:
            host.health = DEAD  # no worker on this host: its runs stay pending
        elif host.name in suspect:
            host.mark_suspect()  # its node is gone now: wait for it, bounded
    return hosts


def _loop(ctx: _Ctx) -> None:
    opts = ctx.opts
    watching = _watching(ctx)
    while True:
        for host in ctx.hosts.values():
            hostwatch.watch(watching, host)
            _say_machine_wait(ctx, host)
            _maybe_dispatch(ctx, host)
        if hostwatch.nothing_left(watching):
            return
        refs = [h.inflight.ref for h in ctx.hosts.values()
                if h.inflight is not None and h.inflight.ref is not None]
        if not refs:
            ctx.writer.heartbeat()
            time.sleep(min(opts.poll_s, 0.05))  # waiting for a lock, quiet or an away host
            continue
        ready, _ = ray.wait(refs, num_returns=1, timeout=opts.poll_s)
        for host in ctx.hosts.values():
            if host.inflight is not None and host.inflight.ref in ready:
                hostwatch.settle(watching, host)
        _check_timeouts(ctx)
        assert ctx.leases is not None  # runs are in flight, so there are hosts and leases
        ctx.leases.renew(ctx.busy_machines)
        ctx.writer.heartbeat()


def _watching(ctx: _Ctx) -> hostwatch.WatchCtx:
    """This call as `hostwatch` sees it: what it stores and tells goes through here."""
    return hostwatch.WatchCtx(
        opts=ctx.opts,
        hosts=ctx.hosts,
        host_news=partial(_host_news, ctx),
        interrupt=partial(_interrupt, ctx),
        fail=partial(_fail, ctx),
        run_over=partial(_run_over, ctx),
        store_result=partial(_store_result, ctx),
        store_late=partial(_store_late, ctx),
        late_loss=partial(_late_loss, ctx),
    )


def _maybe_dispatch(ctx: _Ctx, host: HostState) -> None:
    if host.health != HEALTHY or host.inflight is not None or not host.queue:
        return
    if host.settling(time.monotonic()):
        return  # back from unreachable: Ray may still declare its node dead (see settle_max_s)
    if host.machine in ctx.busy_machines:
        return  # another host of this machine is running (same driver)
    opts = ctx.opts
    if opts.require_quiet and not _quiet_or_say_why(ctx, host):
        return
    assert ctx.leases is not None  # made whenever there are hosts
    if not ctx.leases.acquire(host.machine):  # another driver's matrix holds the machine
        reason = host.lease_wait.refused(ctx.leases.refused.get(host.machine, ""),
                                        time.monotonic())
        if reason:  # whose turn it is, and the waited seconds (once a second at most)
            _emit(ctx, host, host.queue[0].run_key, "leased", reason)
        return
    host.lease_wait.granted()  # its "running" ends the wait on bars and lines
    spec = host.queue.popleft()
    try:
        ctx.writer.mark_running(spec.run_key)
    except StoreConflict:  # done or owned by another driver meanwhile: never run it twice
        return
    ctx.busy_machines.add(host.machine)
    if needs_costs(spec.arm):
        spec = with_stored_costs(ctx.store, spec)
    host.inflight = InFlight(spec, host.worker.run.remote(spec), time.monotonic())
    _emit(ctx, host, spec.run_key, "running")


def _quiet_or_say_why(ctx: _Ctx, host: HostState) -> bool:
    """--require-quiet: whether the host may run now; each new reason to wait is emitted."""
    shown = host.quiet_reason
    if host.quiet_enough(1.0, ctx.opts.quiet_wait_s, ctx.opts.call_timeout_s):
        if host.gave_up:
            _emit(ctx, host, host.queue[0].run_key, "gave up", host.gave_up)
            host.gave_up = ""
        return True
    if host.quiet_reason and host.quiet_reason != shown:
        _emit(ctx, host, host.queue[0].run_key, "waiting", host.quiet_reason)
    return False


def _say_machine_wait(ctx: _Ctx, host: HostState) -> None:
    """A run sent that waits on its worker (its pings say so): "queued" and who holds the
    machine lock (another specfleet process times a run there), or "behind" and the run the
    worker is still busy with (one whose driver was killed: the lease it held went with the
    driver, its run goes on); then "running" once ours has the machine."""
    flight, answer = host.inflight, host.answer
    ours = flight is not None and flight.cut_at is None
    wait = answer.get("machine_wait") if ours else None
    # Asked after ours was sent: an answer from before names our previous run.
    fresh = flight is not None and host.answer_asked_at >= flight.sent_at
    other = answer.get("run_key") if ours and fresh and answer.get("busy") else None
    if flight is not None and wait and answer.get("run_key") == flight.spec.run_key:
        _say_wait(ctx, host, "queued",
                  machine_wait_reason(wait.get("held_by", ""), wait.get("waited_s", 0.0)))
    elif flight is not None and other and other != flight.spec.run_key:
        _say_wait(ctx, host, "behind",
                  busy_worker_reason(other, time.monotonic() - flight.sent_at))
    elif host.machine_wait:
        host.machine_wait = ""
        if flight is not None and ours:
            _emit(ctx, host, flight.spec.run_key, "running")


def _say_wait(ctx: _Ctx, host: HostState, status: str, reason: str) -> None:
    assert host.inflight is not None
    if reason != host.machine_wait:
        host.machine_wait = reason
        _emit(ctx, host, host.inflight.spec.run_key, status, reason)


def _late_loss(ctx: _Ctx, host: HostState, flight: InFlight, why: str) -> None:
    """The result of a run cut loose will not come: it stays `interrupted` for `matrix
    resume` (`job resume` for a generation job's run)."""
    _emit(ctx, host, flight.spec.run_key, "interrupted", f"its result is lost ({why}); "
          f"it stays interrupted for `{resumed_by(flight.spec)}`", flight.spec, late=True)


def _leases(owner: str, opts: SchedulerOptions, hosts: dict[str, HostState]) -> locks.Leases:
    """The machine leases of this call, named for a driver that waits on them: `matrix M`
    or `job J` (whose runs have no matrix)."""
    first = next(spec for host in hosts.values() for spec in host.queue)
    return locks.Leases(owner, opts.lease_s, opts.call_timeout_s,
                        f"{owner_kind(first)} {owner}")


def _store_late(ctx: _Ctx, host: HostState, flight: InFlight, result: RunResult) -> None:
    """The result of a run cut loose came back after all: stored (once), no longer
    interrupted."""
    try:
        ctx.writer.record(result)
    except StoreConflict:  # another driver stored this run first; its result stands
        return
    host.interrupted -= 1  # counted when it was cut loose; now counted by its result
    host.count(result)
    assert flight.cut_at is not None
    late_s = time.monotonic() - flight.cut_at
    _emit(ctx, host, flight.spec.run_key, result.status,
          f"its result came back {late_s:.0f} s after the run was cut loose; stored",
          flight.spec, result.tok_per_s, late=True)


def _store_result(ctx: _Ctx, host: HostState, spec: RunSpec, result: RunResult) -> None:
    if result.calibration is not None:
        lost = ctx.writer.record_calibration(result.target, spec.model, result.calibration)
        print(f"{result.target.label} {spec.model}: no stored width-cost table matched; "
              f"measured one in {result.calibration['measure_s']} s and "
              f"{'stored it' if lost is None else 'could not store it: ' + lost}",
              file=sys.stderr)
    try:
        ctx.writer.record(result)  # journaled first; failed and cancelled keep provenance
    except StoreConflict:  # another driver stored this run first; its result stands
        _emit(ctx, host, spec.run_key, "done")
        return
    host.count(result)
    _emit(ctx, host, spec.run_key, result.status, result.error or "", spec, result.tok_per_s)


def _fail(ctx: _Ctx, host: HostState, spec: RunSpec, error: str) -> None:
    ctx.writer.mark_failed(spec.run_key, error)
    host.failed += 1
    _emit(ctx, host, spec.run_key, "failed", error, spec)


def _interrupt(ctx: _Ctx, host: HostState, spec: RunSpec, reason: str) -> None:
    ctx.writer.mark_interrupted(spec.run_key, reason)
    host.interrupted += 1
    _emit(ctx, host, spec.run_key, "interrupted", reason, spec)


def _check_timeouts(ctx: _Ctx) -> None:
    now = time.monotonic()
    limit_s = ctx.opts.run_timeout_s
    for host in ctx.hosts.values():
        flight = host.inflight
        if flight is None or now - flight.sent_at < limit_s:
            continue
        host.inflight = None
        if flight.cut_at is None:
            _interrupt(ctx, host, flight.spec, f"timed out after {limit_s:g} s; cancelled")
            host.cancel_quietly()
            host.mark_suspect()
            _run_over(ctx, host)


def _run_over(ctx: _Ctx, host: HostState) -> None:
    """The machine is free again; keep its lease only while more runs wait for it."""
    ctx.busy_machines.discard(host.machine)
    wanted = any(h.queue and h.health == HEALTHY for h in ctx.hosts.values()
                 if h.machine == host.machine)
    if not wanted:
        assert ctx.leases is not None  # made whenever there are hosts
        ctx.leases.release(host.machine)


def _emit(ctx: _Ctx, host: HostState, run_key: str, status: str, reason: str = "",
          spec: RunSpec | None = None, tok_per_s: float | None = None,
          late: bool = False) -> None:
    failed = host.failed + host.interrupted
    words = run_words(spec, ctx.name_hosts, ctx.name_models) if spec is not None else ""
    event = ProgressEvent(host.name, run_key, status, host.done, failed, host.total, host.health,
                          reason, words, tok_per_s, late)
    ctx.notify(event)


def _host_news(ctx: _Ctx, host: HostState, status: str, reason: str) -> None:
    """A change of the host itself (`progress.HOST_NEWS`), e.g. `h2: unreachable: ...`."""
    assert status in HOST_NEWS
    _emit(ctx, host, "", status, reason)
