"""Dispatch a matrix's runs to the fleet: one timed run at a time per physical machine.

Each host gets its own queue (the plan's order). A run is marked `running` in the store
before it is sent and its result is stored the moment it returns. A run whose worker is lost
becomes `interrupted` (never replayed here; `resume` re-queues it on the user's word), a run
that fails inside the worker becomes `failed` with its error, and the other hosts go on.
A host that lost a run is `suspect` and gets nothing new until it answers a ping again.

A host is watched on specfleet's own terms, whatever Ray's health checks say: while it runs
one of ours its worker is pinged every second over its control group, and a worker silent for
`unreachable_after_s` makes the host `unreachable` and its run `interrupted` ("host unreachable
for 8 s"). Its result is still taken if it comes back (stored once), and the host's queue
waits for it up to `host_wait_s`, then stays `pending` for `resume`.
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
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayTaskError

from specfleet.cluster import locks
from specfleet.cluster.fleet import DEAD, HEALTHY, SUSPECT, UNREACHABLE
from specfleet.cluster.hoststate import (
    WORKER_LOST,
    HostState,
    HostTally,
    InFlight,
    store_load_samples,
)
from specfleet.cluster.matrixcall import MatrixOutcome, RunInterrupted, SchedulerOptions
from specfleet.cluster.progress import (
    HOST_NEWS,
    STORE_LINE,
    ProgressCallback,
    ProgressEvent,
    fan_out,
    progress_for,
)
from specfleet.cluster.storewriter import StoreWriter
from specfleet.engine.config import needs_costs
from specfleet.jobs.run import RunResult, RunSpec
from specfleet.settings import LEASE_S
from specfleet.store.errors import StoreConflict
from specfleet.store.leases import new_driver_id

MAX_CLAIMS = 3  # asks for a kept result that fail (its worker restarting) before giving up

__all__ = [
    "HostTally",
    "dispatch_runs",
    "resume",
    "run_matrix",
]


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
) -> MatrixOutcome:
    """Run every `pending` run of a matrix and store each result as it returns.

    Interrupted and failed runs are left alone (see `resume`).

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

    Returns:
        The `MatrixOutcome`; the matrix is finished in the store with its `status`.
    """
    return _run_owned(store, matrix_id, workers, on_progress, options, machines, requeue=False,
                      suspect=suspect)


def _run_owned(store, matrix_id: str, workers: dict[str, Any],
               on_progress: ProgressCallback | None, options: SchedulerOptions | None,
               machines: dict[str, str] | None, requeue: bool,
               suspect: Iterable[str] = ()) -> MatrixOutcome:
    started = time.monotonic()
    opts = options or SchedulerOptions()
    driver_id = new_driver_id()
    claim = store.claim_matrix(matrix_id, driver_id, _lease_s(opts), requeue=requeue)
    if not claim.taken:  # a live driver runs it: take nothing, say so
        return MatrixOutcome(matrix_id, "running", 0, 0, 0, 0, time.monotonic() - started, {},
                             skipped=claim.skipped, owner=claim.owner)
    pending = {row.run_key for row in store.runs(matrix=matrix_id, status="pending")}
    runs = [spec for spec in store.runs_not_done(matrix_id) if spec.run_key in pending]
    try:
        tallies = dispatch_runs(store, runs, workers, on_progress, options=opts,
                                machines=machines, owner=matrix_id, suspect=suspect,
                                driver_id=driver_id)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: in-flight runs are marked interrupted
        with contextlib.suppress(Exception):
            store.finish_matrix(matrix_id, "interrupted", driver_id)
        raise RunInterrupted(matrix_id) from None
    healthy = {h: workers[h] for h, t in tallies.items() if t.health == "healthy"}
    # The last writes wait out a store outage like every result write did.
    writer = StoreWriter(store, driver_id, _lease_s(opts), opts.store_retry_s,
                         _store_waiting(on_progress or (lambda event: None)))
    store_load_samples(store, matrix_id, healthy, opts.call_timeout_s, writer.retry)
    outcome = _finish(writer, matrix_id, tallies, time.monotonic() - started, driver_id)
    return dataclasses.replace(outcome, skipped=claim.skipped)


def _lease_s(opts: SchedulerOptions) -> float:
    return opts.store_lease_s if opts.store_lease_s is not None else LEASE_S.read()


def resume(
    store,
    matrix_id: str,
    workers: dict[str, Any],
    on_progress: ProgressCallback | None = None,
    *,
    options: SchedulerOptions | None = None,
    machines: dict[str, str] | None = None,
    suspect: Iterable[str] = (),
) -> MatrixOutcome:
    """Take the matrix over, re-queue every run not `done` that no live driver holds,
    and run them.

    A matrix a live driver still holds (its heartbeat lease has not run out) is left
    alone: the outcome then has `owner` set and `skipped` runs. Args and Returns: as
    `run_matrix`. Results already stored are kept as they are.
    """
    return _run_owned(store, matrix_id, workers, on_progress, options, machines, requeue=True,
                      suspect=suspect)


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
        owner: a label for the machine leases (the matrix or job id).
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
                             opts.store_retry_s, _store_waiting(notify))
        ctx = _Ctx(
            store=store,
            hosts=hosts,
            opts=opts,
            notify=notify,
            leases=locks.Leases(owner, opts.lease_s, opts.call_timeout_s) if hosts else None,
            name_hosts=len(hosts) > 1,
            name_models=len({s.model for h in hosts.values() for s in h.queue}) > 1,
            writer=writer,
        )
        try:
            _loop(ctx)
        except BaseException as err:  # Ctrl-C or a store fault: runs in flight are lost to us
            _abandon(ctx, f"driver stopped: {type(err).__name__}")
            raise
        finally:
            if ctx.leases is not None:
                ctx.leases.release_all()
    return {name: host.tally() for name, host in hosts.items()}


def _store_waiting(notify: ProgressCallback):
    def say(reason: str) -> None:
        notify(ProgressEvent(STORE_LINE, "", "waiting", 0, 0, 0, "healthy", reason))

    return say


def _abandon(ctx: _Ctx, reason: str) -> None:
    """Cancel and mark `interrupted` every run in flight (best effort, nothing raised)."""
    for host in ctx.hosts.values():
        if host.inflight is not None and host.inflight.cut_at is None:
            host.cancel_quietly()
            with contextlib.suppress(Exception):
                ctx.store.mark_interrupted(host.inflight.spec.run_key, reason)


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
    while True:
        for host in ctx.hosts.values():
            _watch(ctx, host)
            _maybe_dispatch(ctx, host)
        if _nothing_left(ctx):
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
                _settle(ctx, host)
        _check_timeouts(ctx)
        assert ctx.leases is not None  # runs are in flight, so there are hosts and leases
        ctx.leases.renew(ctx.busy_machines)
        ctx.writer.heartbeat()


def _nothing_left(ctx: _Ctx) -> bool:
    """No host can still do anything this call: its queue is empty and nothing of ours is in
    flight there, or it has been away longer than `host_wait_s` (then it is given up)."""
    now = time.monotonic()
    away = []
    for host in ctx.hosts.values():
        if (not host.queue and host.inflight is None) or host.health == DEAD:
            continue
        if host.health == HEALTHY or now - host.away_since < ctx.opts.host_wait_s:
            return False
        away.append(host)
    for host in away:
        _give_up(ctx, host, now)
    return True


def _give_up(ctx: _Ctx, host: HostState, now: float) -> None:
    host.inflight = None  # a run cut loose: already `interrupted` in the store
    _host_news(ctx, host, "gave up", f"gave up: {host.health} for "
               f"{now - host.away_since:.0f} s, longer than --wait {ctx.opts.host_wait_s:g} s; "
               f"{len(host.queue)} of its runs stay pending")


def _watch(ctx: _Ctx, host: HostState) -> None:
    """Ping a host that runs one of ours or is away; cut loose the run of a host gone silent;
    say when it answers again."""
    if host.health == DEAD:
        return
    was = host.health
    if host.listen(ctx.opts.ping_every_s):
        _back(ctx, host, was)
    _end_settling(ctx, host)
    flight = host.inflight
    if flight is None or host.health != HEALTHY:
        return
    now = time.monotonic()
    if flight.cut_at is not None:
        _claim_if_gone(ctx, host, now)
        return
    silent_s = host.silent_s(now)
    if silent_s >= ctx.opts.unreachable_after_s:
        _cut_loose(ctx, host, silent_s, now)


def _back(ctx: _Ctx, host: HostState, was: str) -> None:
    """An away host answered. Back from unreachable with the same worker process, it gets
    its next run only after as long again as it was away (`settle_max_s` at most)."""
    now = time.monotonic()
    away_s = now - host.away_since
    settle = ""
    if was == UNREACHABLE and host.same_worker():
        settle_s = min(away_s, ctx.opts.settle_max_s)
        host.settle_until = now + settle_s
        settle = f"; its next run in {settle_s:.0f} s (Ray may still declare its node dead)"
    _host_news(ctx, host, "back", f"back: answers again after {away_s:.0f} s {was}{settle}")


def _end_settling(ctx: _Ctx, host: HostState) -> None:
    """At the end of a host's settling time, Ray refusing its pings still (a reset connection
    alone heals within a ping or two) means its node was declared dead after all."""
    if not host.settle_until or host.settling(time.monotonic()):
        return
    host.settle_until = 0.0
    if host.refusal:
        host.mark_suspect()
        _host_news(ctx, host, SUSPECT, f"suspect: its worker went away after it answered "
                   f"again ({host.refusal})")


def _cut_loose(ctx: _Ctx, host: HostState, silent_s: float, now: float) -> None:
    """The worker answered no ping for `silent_s`: the run is `interrupted` now, the host
    `unreachable` (or `suspect` when Ray refused the pings); its result is still taken if it
    comes back."""
    flight = host.inflight
    assert flight is not None
    flight.cut_at = now
    if host.refusal:
        host.mark_suspect()
        why = f"worker unavailable for {silent_s:.0f} s ({host.refusal})"
    else:
        host.mark_unreachable(now - silent_s)
        why = f"host unreachable for {silent_s:.0f} s"
    _interrupt(ctx, host, flight.spec, why)
    _host_news(ctx, host, host.health, f"{host.health}: no answer to pings for "
               f"{silent_s:.0f} s; its run is interrupted; waiting up to "
               f"{ctx.opts.host_wait_s:g} s for it (--wait)")
    # Other hosts of its machine may go on: the worker's machine lock still keeps their
    # timed runs apart from this one, should it still be running.
    _run_over(ctx, host)


def _claim_if_gone(ctx: _Ctx, host: HostState, now: float) -> None:
    """A host back from away no longer runs the run we cut loose, and its reply has not come
    within `call_timeout_s`: ask the worker for the result it kept."""
    flight = host.inflight
    assert flight is not None and flight.cut_at is not None
    if flight.claimed or host.answer.get("run_key") == flight.spec.run_key:
        flight.gone_at = None  # asked already, or still running there: its result will come
        return
    if flight.ref is None:  # its reply is lost: ask again once the worker answers anew
        if host.heard > flight.heard_when_lost:
            _claim(host, flight)
        return
    if flight.gone_at is None:
        flight.gone_at = now
    elif now - flight.gone_at >= ctx.opts.call_timeout_s:
        _claim(host, flight)


def _claim(host: HostState, flight: InFlight) -> None:
    """Ray lost the reply of a run cut loose: wait for the worker's kept result instead."""
    flight.ref, flight.claimed = host.worker.result.remote(flight.spec.run_key), True
    host.inflight = flight


def _claim_later(ctx: _Ctx, host: HostState, flight: InFlight, err: Exception) -> None:
    """The worker could not be asked (it restarts: Ray declared its node dead). The result
    is kept on the host's disk: ask the next worker process once it answers, a few times."""
    flight.claims += 1
    if flight.claims >= MAX_CLAIMS:
        _late_loss(ctx, host, flight, f"its worker cannot be asked: {_one_line(err, 160)}")
        return
    flight.ref, flight.claimed, flight.gone_at = None, False, None
    flight.heard_when_lost = host.heard
    host.inflight = flight


def _maybe_dispatch(ctx: _Ctx, host: HostState) -> None:
    if host.health != HEALTHY or host.inflight is not None or not host.queue:
        return
    if host.settling(time.monotonic()):
        return  # back from unreachable: Ray may still declare its node dead (see matrixcall)
    if host.machine in ctx.busy_machines:
        return  # another host of this machine is running (same driver)
    opts = ctx.opts
    if opts.require_quiet and not _quiet_or_say_why(ctx, host):
        return
    assert ctx.leases is not None  # made whenever there are hosts
    if not ctx.leases.acquire(host.machine):
        return  # another driver's matrix holds the machine
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


def _settle(ctx: _Ctx, host: HostState) -> None:
    flight = host.inflight
    assert flight is not None
    host.inflight = None
    cut = flight.cut_at is not None  # a run cut loose freed its machine then
    try:
        result = ray.get(flight.ref, timeout=ctx.opts.call_timeout_s)
    except (*WORKER_LOST, RayTaskError, GetTimeoutError) as err:
        if not cut:
            _lost(ctx, host, flight, err)
        elif not flight.claimed:
            _claim(host, flight)
        else:
            _claim_later(ctx, host, flight, err)
    else:
        if not cut:
            _store_result(ctx, host, flight.spec, result)
        elif result is None:
            _late_loss(ctx, host, flight, "its host does not have it: it never finished there")
        else:
            _store_late(ctx, host, flight, result)
    finally:
        if not cut:
            _run_over(ctx, host)


def _lost(ctx: _Ctx, host: HostState, flight: InFlight, err: Exception) -> None:
    if isinstance(err, RayTaskError):  # raised outside HostWorker's own error handling
        _fail(ctx, host, flight.spec, _task_error(err))
        return
    why = "result not fetched in time" if isinstance(err, GetTimeoutError) \
        else f"worker lost: {_one_line(err)}"
    _interrupt(ctx, host, flight.spec, why)
    host.mark_suspect()  # a detached worker with max_restarts=-1 may come back
    if isinstance(err, WORKER_LOST):  # it may have finished first: its host keeps the result
        flight.cut_at, flight.ref, flight.heard_when_lost = time.monotonic(), None, host.heard
        host.inflight = flight


def _late_loss(ctx: _Ctx, host: HostState, flight: InFlight, why: str) -> None:
    """The result of a run cut loose will not come: it stays `interrupted` for `resume`."""
    _emit(ctx, host, flight.spec.run_key, "interrupted", f"its result is lost ({why}); "
          "it stays interrupted for `matrix resume`", flight.spec, late=True)


def _store_late(ctx: _Ctx, host: HostState, flight: InFlight, result: RunResult) -> None:
    """The result of a run cut loose came back after all: stored (once), no longer
    interrupted."""
    try:
        ctx.writer.record(result)
    except StoreConflict:  # another driver stored this run first; its result stands
        return
    host.interrupted -= 1  # counted when it was cut loose; now counted by its result
    _tally(host, result)
    assert flight.cut_at is not None
    late_s = time.monotonic() - flight.cut_at
    _emit(ctx, host, flight.spec.run_key, result.status,
          f"its result came back {late_s:.0f} s after the run was cut loose; stored",
          flight.spec, result.tok_per_s, late=True)


def _store_result(ctx: _Ctx, host: HostState, spec: RunSpec, result: RunResult) -> None:
    if result.calibration is not None:
        ctx.store.record_calibration(result.target, spec.model, result.calibration)
        print(f"{result.target.label} {spec.model}: no stored width-cost table matched; "
              f"measured one in {result.calibration['measure_s']} s and stored it",
              file=sys.stderr)
    try:
        ctx.writer.record(result)  # journaled first; failed and cancelled keep provenance
    except StoreConflict:  # another driver stored this run first; its result stands
        _emit(ctx, host, spec.run_key, "done")
        return
    _tally(host, result)
    _emit(ctx, host, spec.run_key, result.status, result.error or "", spec, result.tok_per_s)


def _tally(host: HostState, result: RunResult) -> None:
    """Count a stored result on its host (interrupted: cancelled cooperatively by the worker)."""
    if result.status == "done":
        host.done += 1
        host.run_s += result.total_s
    elif result.status == "failed":
        host.failed += 1
    else:
        host.interrupted += 1


def with_stored_costs(store, spec: RunSpec) -> RunSpec:
    """A calibrated run with the newest stored width-cost table of its host, engine, device
    and model attached (the worker uses it only if its fingerprint and weights match)."""
    from specfleet.workers.costs import costs_key

    rows = store.latest_calibration(spec.target.engine, spec.target.device, spec.model,
                                    host=spec.target.host)
    if not rows or any(r.ratio is None for r in rows):
        return spec
    key = costs_key(rows[0].host_fingerprint, rows[0].weights_hash)
    return spec.model_copy(update={"costs": tuple(r.ratio for r in rows), "costs_key": key})


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
    words = _run_words(ctx, spec) if spec is not None else ""
    event = ProgressEvent(host.name, run_key, status, host.done, failed, host.total, host.health,
                          reason, words, tok_per_s, late)
    ctx.notify(event)


def _host_news(ctx: _Ctx, host: HostState, status: str, reason: str) -> None:
    """A change of the host itself (`progress.HOST_NEWS`), e.g. `h2: unreachable: ...`."""
    assert status in HOST_NEWS
    _emit(ctx, host, "", status, reason)


def _run_words(ctx: _Ctx, spec: RunSpec) -> str:
    """`torch edit_fn graded rep 2` (repeats counted from 1), host and model when they vary."""
    where = f"{spec.target.host}/{spec.target.engine}" if ctx.name_hosts else spec.target.engine
    model = f" {spec.model}" if ctx.name_models else ""
    return f"{where}{model} {spec.prompt_name} {spec.arm} rep {spec.repeat + 1}"


def _finish(writer: StoreWriter, matrix_id: str, tallies: dict[str, HostTally], wall_s: float,
            driver_id: str) -> MatrixOutcome:
    store = writer.store
    counts = writer.retry("read the matrix's counts", store.get_matrix, matrix_id).counts
    left = {status: n for status, n in counts.items() if status != "done" and n}
    if not left:
        status = "done"
    elif set(left) == {"failed"}:
        status = "failed"
    else:
        status = "interrupted"
    if not writer.retry("finish the matrix", store.finish_matrix, matrix_id, status, driver_id):
        # taken over after our lease ran out
        status = writer.retry("read the matrix", store.get_matrix, matrix_id).status
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
    return " ".join(str(err).split())[:limit]
