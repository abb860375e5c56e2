"""The scheduler's view of one host: its queue, its run in flight, its health, its gates.

Health follows DESIGN.md: healthy -> suspect (a run was lost or timed out) -> healthy again
when the worker answers a ping. A suspect host gets no new runs. Every Ray call here is
non-blocking (`ray.wait(timeout=0)`) or has a timeout, so one slow host never stalls the rest.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from dataclasses import dataclass
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

from specfleet.jobs.run import RunSpec

# Errors that mean "the worker (or its node) went away": the run's fate is unknown.
WORKER_LOST = (RayActorError, NodeDiedError, ObjectLostError, OwnerDiedError, WorkerCrashedError)
CALL_FAILED = (*WORKER_LOST, RayTaskError, GetTimeoutError)


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
    """A run sent to a worker and not settled yet."""

    spec: RunSpec
    ref: Any
    sent_at: float


@dataclass
class HostState:
    """Mutable per-host state of one scheduler call (never shared between threads)."""

    name: str
    worker: Any
    machine: str
    queue: deque[RunSpec]
    total: int = 0
    health: str = "healthy"
    inflight: InFlight | None = None
    suspect_since: float = 0.0
    ping_ref: Any = None
    ping_at: float = 0.0
    quiet_ref: Any = None
    quiet_at: float = 0.0
    quiet_since: float | None = None  # first time this run waited for quiet
    quiet_reason: str = ""  # why the worker's last quiet check said no (shown to the user)
    gave_up: str = ""  # set when the wait for quiet hit its bound: what the user is told
    done: int = 0
    failed: int = 0
    interrupted: int = 0
    run_s: float = 0.0

    def tally(self) -> HostTally:
        return HostTally(
            self.done, self.failed, self.interrupted, len(self.queue), self.run_s, self.health
        )

    def mark_suspect(self) -> None:
        self.health = "suspect"
        self.suspect_since = time.monotonic()
        self.ping_ref = None
        self.quiet_ref = None

    def check_health(self, every_s: float, timeout_s: float) -> None:
        """Ping a suspect host now and then; an answer makes it healthy again."""
        if self.health != "suspect":
            return
        now = time.monotonic()
        if self.ping_ref is None:
            if now - self.ping_at >= every_s:
                self.ping_ref, self.ping_at = self.worker.ping.remote(), now
            return
        ready, _ = ray.wait([self.ping_ref], timeout=0)
        if ready:
            with contextlib.suppress(*CALL_FAILED):
                ray.get(self.ping_ref, timeout=timeout_s)
                self.health = "healthy"
            self.ping_ref = None
        elif now - self.ping_at > timeout_s:
            self.ping_ref = None  # unanswered (actor restarting): ask again later

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
                       timeout_s: float = 10.0) -> int:
    """Drain each worker's load series (sampled while it ran) into the store.

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
        stored += store.record_load_samples(host, [_load_row(s) for s in samples], matrix_id)
    return stored


def _load_row(sample: dict) -> dict:
    # The worker's `hardware.LoadSample` names -> the store's `load_samples` columns.
    return {
        "t": datetime.fromtimestamp(sample["at"], UTC),
        "load1": sample.get("load_1m"), "load5": sample.get("load_5m"),
        "load15": sample.get("load_15m"), "cpu_util": sample.get("cpu_percent"),
        "gpu_util": sample.get("gpu_util_percent"),
    }
