"""Following a host's reachability while it runs one of ours, on specfleet's own terms,
whatever Ray's health checks say.

While a host runs one of ours, and while it is away, its worker is pinged every second over
its control group, and a worker silent for `unreachable_after_s` makes the host `unreachable`
and its run `interrupted` ("host unreachable for 8 s"). A host that answers again is back;
back from unreachable with the same worker process, it settles before its next run. The
result of a run cut loose is still taken if it comes back (stored once), from its reply or,
that reply lost, from the result the worker kept on the host's disk (claimed), and the host's
queue waits for it up to `host_wait_s`, then stays `pending` for `resume`.

`scheduler.dispatch_runs` calls `watch` for each host, `settle` when a reply is ready and
`nothing_left` to end; what they store and tell goes through the scheduler (`WatchCtx`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import ray
from ray.exceptions import GetTimeoutError, RayTaskError

from specfleet.cluster.fleet import DEAD, HEALTHY, SUSPECT, UNREACHABLE
from specfleet.cluster.hoststate import WORKER_LOST, HostState, InFlight
from specfleet.jobs.run import RunResult, RunSpec

MAX_CLAIMS = 3  # asks for a kept result that fail (its worker restarting) before giving up


class WatchOptions(Protocol):
    """The options of a scheduler call that following its hosts reads
    (`scheduler.SchedulerOptions`)."""

    @property
    def call_timeout_s(self) -> float: ...
    @property
    def ping_every_s(self) -> float: ...
    @property
    def unreachable_after_s(self) -> float: ...
    @property
    def host_wait_s(self) -> float: ...
    @property
    def settle_max_s(self) -> float: ...


@dataclass(frozen=True)
class WatchCtx:
    """One scheduler call as following its hosts sees it: its options, its hosts, and how it
    stores and tells (the scheduler's own functions, each taking the host first)."""

    opts: WatchOptions
    hosts: dict[str, HostState]
    host_news: Callable[[HostState, str, str], None]  # a change of the host itself
    interrupt: Callable[[HostState, RunSpec, str], None]  # the run `interrupted`, with why
    fail: Callable[[HostState, RunSpec, str], None]  # the run `failed`, with its error
    run_over: Callable[[HostState], None]  # the host's machine is free again
    store_result: Callable[[HostState, RunSpec, RunResult], None]
    store_late: Callable[[HostState, InFlight, RunResult], None]  # a run cut loose came back
    late_loss: Callable[[HostState, InFlight, str], None]  # a run cut loose will not come


def nothing_left(ctx: WatchCtx) -> bool:
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


def _give_up(ctx: WatchCtx, host: HostState, now: float) -> None:
    host.inflight = None  # a run cut loose: already `interrupted` in the store
    ctx.host_news(host, "gave up", f"gave up: {host.health} for "
                  f"{now - host.away_since:.0f} s, longer than --wait {ctx.opts.host_wait_s:g} s; "
                  f"{len(host.queue)} of its runs stay pending")


def watch(ctx: WatchCtx, host: HostState) -> None:
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


def _back(ctx: WatchCtx, host: HostState, was: str) -> None:
    """An away host answered. Back from unreachable with the same worker process, it gets
    its next run only after as long again as it was away (`settle_max_s` at most)."""
    now = time.monotonic()
    away_s = now - host.away_since
    settle = ""
    if was == UNREACHABLE and host.same_worker():
        settle_s = min(away_s, ctx.opts.settle_max_s)
        host.settle_until = now + settle_s
        settle = f"; its next run in {settle_s:.0f} s (Ray may still declare its node dead)"
    ctx.host_news(host, "back", f"back: answers again after {away_s:.0f} s {was}{settle}")


def _end_settling(ctx: WatchCtx, host: HostState) -> None:
    """At the end of a host's settling time, Ray refusing its pings still (a reset connection
    alone heals within a ping or two) means its node was declared dead after all."""
    if not host.settle_until or host.settling(time.monotonic()):
        return
    host.settle_until = 0.0
    if host.refusal:
        host.mark_suspect()
        ctx.host_news(host, SUSPECT, f"suspect: its worker went away after it answered "
                      f"again ({host.refusal})")


def _cut_loose(ctx: WatchCtx, host: HostState, silent_s: float, now: float) -> None:
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
    ctx.interrupt(host, flight.spec, why)
    ctx.host_news(host, host.health, f"{host.health}: no answer to pings for "
                  f"{silent_s:.0f} s; its run is interrupted; waiting up to "
                  f"{ctx.opts.host_wait_s:g} s for it (--wait)")
    # Other hosts of its machine may go on: the worker's machine lock still keeps their
    # timed runs apart from this one, should it still be running.
    ctx.run_over(host)


def _claim_if_gone(ctx: WatchCtx, host: HostState, now: float) -> None:
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


def _claim_later(ctx: WatchCtx, host: HostState, flight: InFlight, err: Exception) -> None:
    """The worker could not be asked (it restarts: Ray declared its node dead). The result
    is kept on the host's disk: ask the next worker process once it answers, a few times."""
    flight.claims += 1
    if flight.claims >= MAX_CLAIMS:
        ctx.late_loss(host, flight, f"its worker cannot be asked: {_one_line(err, 160)}")
        return
    flight.ref, flight.claimed, flight.gone_at = None, False, None
    flight.heard_when_lost = host.heard
    host.inflight = flight


def settle(ctx: WatchCtx, host: HostState) -> None:
    """The reply of the host's run in flight is ready: store its result (late, for a run cut
    loose), or, when it cannot be fetched, mark the run lost or claim the result kept there."""
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
            ctx.store_result(host, flight.spec, result)
        elif result is None:
            ctx.late_loss(host, flight, "its host does not have it: it never finished there")
        else:
            ctx.store_late(host, flight, result)
    finally:
        if not cut:
            ctx.run_over(host)


def _lost(ctx: WatchCtx, host: HostState, flight: InFlight, err: Exception) -> None:
    if isinstance(err, RayTaskError):  # raised outside HostWorker's own error handling
        ctx.fail(host, flight.spec, _task_error(err))
        return
    why = "result not fetched in time" if isinstance(err, GetTimeoutError) \
        else f"worker lost: {_one_line(err)}"
    ctx.interrupt(host, flight.spec, why)
    host.mark_suspect()  # a detached worker with max_restarts=-1 may come back
    # Said, or its "back: ... suspect" line came of a state never announced.
    ctx.host_news(host, SUSPECT, "suspect: its worker was lost during a run, which is "
                  f"interrupted; waiting up to {ctx.opts.host_wait_s:g} s for it (--wait)")
    if isinstance(err, WORKER_LOST):  # it may have finished first: its host keeps the result
        flight.cut_at, flight.ref, flight.heard_when_lost = time.monotonic(), None, host.heard
        host.inflight = flight


def _task_error(err: RayTaskError) -> str:
    cause = getattr(err, "cause", None)
    if cause is not None:
        return _one_line(f"{type(cause).__name__}: {cause}")
    return _one_line(err)


def _one_line(err: object, limit: int = 500) -> str:
    return " ".join(str(err).split())[:limit]
