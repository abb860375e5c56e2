"""The scheduler's view of one host: its queue, its run in flight, its health, its gates.

Health (`fleet.Health`): healthy -> suspect (a run was lost or timed out; Ray says the worker
is unavailable) or unreachable (its worker answers no ping at all) -> healthy again when the
worker answers a ping. A host that is not healthy gets no new runs. While a run is in flight,
and while the host is away, the worker is pinged every second over its control group (never
behind a run): silence is measured from the oldest ping still unanswered, so a driver that
was itself stalled (a store outage) never mistakes its own pause for the host's.
Every Ray call here is non-blocking (`ray.wait(timeout=0)`) or has a timeout, so one slow host
never stalls the rest.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
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

from specfleet.cluster.fleet import HEALTHY, SUSPECT, UNREACHABLE, Health
from specfleet.cluster.progress import LeaseWait
from specfleet.jobs.run import RunResult, RunSpec

# Errors that mean "the worker (or its node) went away": the run's fate is unknown.
WORKER_LOST = (RayActorError, NodeDiedError, ObjectLostError, OwnerDiedError, WorkerCrashedError)
CALL_FAILED = (*WORKER_LOST, RayTaskError, GetTimeoutError)
MAX_PINGS = 8  # unanswered pings kept; an older one is let go (the worker still answers it)


@dataclass(frozen=True)
class HostTally:
    """What happened on one host during one scheduler call."""

    done: int
    failed: int
    interrupted: int
    pending: int
    run_s: float  # sum of the runs' own total_s
    health: str


@dataclass
class InFlight:
    """A run sent to a worker and not settled yet.

    A run whose host went silent is `interrupted` in the store at once (`cut_at` set) but
    stays here: its result may still come back, and is then stored (once: the store is
    idempotent by run key); the host takes no new run meanwhile. When Ray loses the reply
    (a cut link resets the connection, or its node is declared dead), the host's worker is
    asked for the result it kept (`claimed`: `ref` is then that call's; None while waiting
    for the host to answer again).
    """

    spec: RunSpec
    ref: Any
    sent_at: float
    cut_at: float | None = None
    gone_at: float | None = None  # when the host, back, first said it no longer runs it
    claimed: bool = False
    claims: int = 0  # claims that failed (the worker restarting)
    heard_when_lost: int = 0  # `HostState.heard` then: the next claim waits for a new answer


@dataclass
class HostState:
    """Mutable per-host state of one scheduler call (never shared between threads)."""

    name: str
    worker: Any
    machine: str
    queue: deque[RunSpec]
    total: int = 0
    health: Health = HEALTHY
    inflight: InFlight | None = None
    away_since: float = 0.0  # when it stopped being healthy
    back_at: float = 0.0  # when it last answered after being away
    settle_until: float = 0.0  # back from unreachable: no new run before this
    pid_when_left: int | None = None  # the worker process that answered before it went away
    pings: deque[tuple[Any, float]] = field(default_factory=deque)  # unanswered (ref, sent at)
    ping_at: float = 0.0
    silent_from: float | None = None  # sent time of the oldest ping unanswered since an answer
    heard: int = 0  # answers received (a host is back when this grows while it is away)
    heard_when_left: int = 0
    answer: dict = field(default_factory=dict)  # the newest ping answer (busy, run_key)
    answer_asked_at: float = 0.0  # when the ping of `answer` was sent
    refusal: str = ""  # Ray's newest error for a ping ("" once the worker answers)
    quiet_ref: Any = None
    quiet_at: float = 0.0
    quiet_since: float | None = None  # first time this run waited for quiet
    quiet_reason: str = ""  # why the worker's last quiet check said no (shown to the user)
    gave_up: str = ""  # set when the wait for quiet hit its bound: what the user is told
    machine_wait: str = ""  # its run waits for the machine lock: what the user was told last
    lease_wait: LeaseWait = field(default_factory=LeaseWait)  # for another driver's lease
    done: int = 0
    failed: int = 0
    interrupted: int = 0
    run_s: float = 0.0

    def count(self, result: RunResult) -> None:
        """Count a stored result (interrupted: cancelled cooperatively by the worker)."""
        if result.status == "done":
            self.done += 1
            self.run_s += result.total_s
        elif result.status == "failed":
            self.failed += 1
        else:
            self.interrupted += 1

    def tally(self) -> HostTally:
        return HostTally(
            self.done, self.failed, self.interrupted, len(self.queue), self.run_s, self.health
        )

    def mark_suspect(self) -> None:
        """Its worker was lost or a run timed out: only pings sent from now on can clear it."""
        self.pings.clear()
        self.silent_from = None
        self._leave(SUSPECT)

    def mark_unreachable(self, since: float) -> None:
        """Its worker has been silent since `since`; the pings already out still count when
        answered."""
        self._leave(UNREACHABLE, since)

    def _leave(self, health: Health, since: float | None = None) -> None:
        if self.health == HEALTHY:
            self.away_since = since if since is not None else time.monotonic()
            self.pid_when_left = self.answer.get("pid")
        self.health = health
        self.heard_when_left = self.heard
        self.quiet_ref = None
        self.settle_until = 0.0

    def settling(self, now: float) -> bool:
        return self.health == HEALTHY and now < self.settle_until

    def same_worker(self) -> bool:
        """Whether the worker answering now may be the process that answered before it left
        (not known when it left before its first answer)."""
        return self.pid_when_left is None or self.answer.get("pid") == self.pid_when_left

    def silent_s(self, now: float) -> float:
        """How long the oldest ping not answered since the last answer has waited."""
        return 0.0 if self.silent_from is None else now - self.silent_from

    def listen(self, every_s: float) -> bool:
        """Ping the worker every `every_s` while a run of ours is in flight there, or the host
        is away or settling, and read the answers.

        Returns:
            True when an away host answered: it is healthy again (`back_at` now).
        """
        now = time.monotonic()
        watching = self.inflight is not None or self.health != HEALTHY or self.settling(now)
        if watching and now - self.ping_at >= every_s:
            self.pings.append((self.worker.ping.remote(), now))
            self.ping_at = now
            self.silent_from = self.silent_from if self.silent_from is not None else now
            while len(self.pings) > MAX_PINGS:
                self.pings.popleft()
        if self.pings:
            self._read_pings()
        if self.health != HEALTHY and self.heard > self.heard_when_left:
            self.health, self.back_at = HEALTHY, now
            return True
        return False

    def _read_pings(self) -> None:
        ready, _ = ray.wait([ref for ref, _ in self.pings], num_returns=len(self.pings),
                            timeout=0)
        done = set(ready)
        for ref, sent in [p for p in self.pings if p[0] in done]:  # oldest first
            try:
                self.answer = ray.get(ref, timeout=1.0)  # ready: returns at once
                self.answer_asked_at = sent
            except CALL_FAILED as err:  # Ray answered for a worker that could not
                self.refusal = " ".join(str(err).split())[:200] or type(err).__name__
                continue
            self.heard += 1
            self.refusal = ""
            later = [at for r, at in self.pings if at > sent and r not in done]
            self.silent_from = min(later, default=None)
        self.pings = deque(p for p in self.pings if p[0] not in done)

    def quiet_enough(self, every_s: float, wait_s: float, timeout_s: float) -> bool:
        """With --require-quiet: True once the worker reports a quiet, unthrottled host (or
        after `wait_s`).

        Waiting longer than `wait_s` runs anyway (`gave_up` says why); the worker flags such
        a result `noisy` or `throttled`.
        """
        now = time.monotonic()
        if self.quiet_since is None:
            self.quiet_since = now
        if now - self.quiet_since >= wait_s:
            why = self.quiet_reason or "no answer from the quiet check"
            self.gave_up = f"gave up waiting after {wait_s:g} s ({why}); running anyway, flagged"
            return self._quiet_done()
        if self.quiet_ref is None:
            if now - self.quiet_at >= every_s:
                self.quiet_ref, self.quiet_at = self.worker.quiet.remote(), now
            return False
        ready, _ = ray.wait([self.quiet_ref], timeout=0)
        if not ready:
            if now - self.quiet_at > timeout_s:
                self.quiet_ref = None
            return False
        ref, self.quiet_ref = self.quiet_ref, None
        try:
            check = ray.get(ref, timeout=timeout_s)
        except CALL_FAILED:
            return False
        if _field(check, "quiet"):
            return self._quiet_done()
        self.quiet_reason = str(_field(check, "reason") or "the host is not quiet")
        return False

    def _quiet_done(self) -> bool:
        self.quiet_since = None
        self.quiet_ref = None
        self.quiet_reason = ""
        return True

    def cancel_quietly(self) -> None:
        # Control group: answered even while a run is going; best effort, the host is suspect.
        with contextlib.suppress(Exception):
            self.worker.cancel.remote()


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name)


def store_load_samples(store, matrix_id: str | None, workers: dict[str, Any],
                       timeout_s: float = 10.0, retry: Callable[..., Any] | None = None) -> int:
    """Drain each worker's load series (sampled while it ran) into the store.

    Args:
        retry: `StoreWriter.retry` to wait out a store outage (None: write once).

    Returns:
        How many samples were stored; a worker that does not answer is skipped.
    """
    refs = {host: worker.drain_load_samples.remote() for host, worker in workers.items()}
    stored = 0
    for host, ref in refs.items():
        try:
            samples = ray.get(ref, timeout=timeout_s)
        except CALL_FAILED:
            continue
        rows = [_load_row(s) for s in samples]
        if retry is None:
            stored += store.record_load_samples(host, rows, matrix_id)
        else:
            stored += retry("store load samples", store.record_load_samples, host, rows,
                            matrix_id)
    return stored


def _load_row(sample: dict) -> dict:
    # The worker's `hardware.LoadSample` names -> the store's `load_samples` columns.
    return {
        "t": datetime.fromtimestamp(sample["at"], UTC),
        "load1": sample.get("load_1m"), "load5": sample.get("load_5m"),
        "load15": sample.get("load_15m"), "cpu_util": sample.get("cpu_percent"),
        "gpu_util": sample.get("gpu_util_percent"),
    }
