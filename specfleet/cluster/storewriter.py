"""The scheduler's side of the store: owned runs, journaled results, writes that outlast
an outage.

- Every run is marked `running` under this driver's id with a heartbeat lease; `heartbeat()`
  renews the leases every `lease_s / 4` (a store fault there is only noted: the next write
  retries anyway).
- A finished result goes to the journal on this machine's disk first, then to the store.
- A write that finds the store unreachable is retried with backoff (0.5 s doubling to 8 s)
  for at most `retry_s`, each wait reported through `on_wait` (the progress line). Past the
  bound it raises `StoreOutage`: the driver stops, and the journal keeps what it finished
  for the next writing command on this store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import OperationalError
from tenacity import RetryCallState, Retrying, retry_if_exception_type, wait_exponential

from specfleet.errors import UserError
from specfleet.jobs.resolve import counted
from specfleet.jobs.run import RunResult, Target
from specfleet.settings import LEASE_S, STORE_RETRY_S
from specfleet.store.errors import StoreConflict, StoreUnreachable
from specfleet.store.journal import Journal, JournalError
from specfleet.store.leases import new_driver_id

T = TypeVar("T")
FIRST_BACKOFF_S = 0.5
MAX_BACKOFF_S = 8.0
FINAL_LIMIT = 400  # the line a driver stops with has the width of a whole error
MIN_WORD_KEPT = 16  # a path cut shorter than this names nothing
LAST_TRY_SLACK_S = 0.1  # a wait this close to the deadline is the last one
_TRANSIENT = (StoreUnreachable, OperationalError)


class StoreOutage(UserError):
    """The store stayed unreachable past the retry bound; finished results are journaled."""


class StoreWriter:
    """Writes of one driver to one store.

    Args:
        store: an open `Store`.
        driver_id: this driver's id (`store.leases.new_driver_id`).
        lease_s: the heartbeat lease.
        retry_s: how long one write keeps retrying an unreachable store.
        on_wait: called with a one-line reason before each retry wait.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(self, store: Any, driver_id: str, lease_s: float, retry_s: float,
                 on_wait: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.driver_id = driver_id
        self.lease_s = lease_s
        self.retry_s = retry_s
        self.on_wait = on_wait or (lambda _reason: None)
        self.journal = Journal(store.url)
        self._clock = clock
        self._beat_at = clock()

    def mark_running(self, run_key: str) -> None:
        """Mark the run running under this driver (StoreConflict: not ours to run)."""
        self.retry("mark a run running", self.store.mark_running, run_key, self.driver_id,
                    self.lease_s)

    def record(self, result: RunResult) -> bool:
        """Journal the result, store it, then drop its journal entry.

        Returns:
            True when written now, False when the store already had it.

        Raises:
            StoreConflict: the store holds a different result (the entry is dropped: the
                stored result stands).
            StoreOutage: the store stayed unreachable; the entry stays to be written back.
            Exception: anything else the store raised; the entry stays, so the result is
                not lost (a write-back sets aside what the store refuses, `.conflict`).
        """
        try:
            self.journal.write(result)
        except JournalError as err:  # the store may still take it: say so and go on
            self.on_wait(str(err))
        try:
            fresh = self.retry("store a result", self.store.record_result, result)
        except StoreConflict:
            self.journal.done(result.run_key)  # refused for good: the stored result stands
            raise
        self.journal.done(result.run_key)
        return fresh

    def record_calibration(self, target: Target, model: str, calibration: dict) -> str | None:
        """Store a width-cost table a run measured, retried as results are; a table lost to
        an outage is measured again next time, so the run's own result goes on.

        Returns:
            None when stored, else why not (`StoreOutage`'s line).
        """
        try:
            self.retry("store the measured width-cost table", self.store.record_calibration,
                       target, model, calibration)
        except StoreOutage as err:
            return str(err)
        return None

    def note_stopped(self) -> None:
        """This driver stops on a store outage: its journal notes it, so the next write-back
        ends its leases (`Journal.note_stopped`)."""
        self.journal.note_stopped(self.driver_id)

    def mark_failed(self, run_key: str, error: str) -> None:
        self.retry("mark a run failed", self.store.mark_failed, run_key, error)

    def mark_interrupted(self, run_key: str, reason: str) -> None:
        self.retry("mark a run interrupted", self.store.mark_interrupted, run_key, reason)

    def heartbeat(self) -> None:
        """Renew this driver's leases if a quarter of the lease has passed."""
        now = self._clock()
        if now - self._beat_at < self.lease_s / 4:
            return
        self._beat_at = now
        try:
            self.store.heartbeat(self.driver_id, self.lease_s)
        except _TRANSIENT as err:
            self.on_wait(f"store unreachable, lease not renewed: {_short(err)}")

    def retry(self, what: str, call: Callable[..., T], *args: Any) -> T:
        """`call(*args)` on the store, retried while it is unreachable (up to `retry_s`;
        a try already under way is not cut short: one waiting for SQLite's write lock takes
        up to 60 s).

        Raises:
            StoreOutage: still unreachable after `retry_s` (names what could not be done, and
                how long its tries really took).
        """
        started = self._clock()
        deadline = started + self.retry_s
        backoff = wait_exponential(multiplier=FIRST_BACKOFF_S, max=MAX_BACKOFF_S)

        def left_s() -> float:
            return deadline - self._clock()

        def say(state: RetryCallState) -> None:
            err = state.outcome.exception() if state.outcome else None
            # The last wait ends at the deadline: a give-up time after it would be stale.
            last = state.upcoming_sleep >= left_s() - LAST_TRY_SLACK_S
            when = (f"last try in {state.upcoming_sleep:.1f} s" if last else
                    f"retry {state.attempt_number} in {state.upcoming_sleep:.1f} s, giving up "
                    f"in {left_s():.0f} s")
            self.on_wait(f"store unreachable ({_short(err)}); {when}; "
                         f"{counted(len(self.journal.pending()), 'result')} journaled")

        retrying = Retrying(
            retry=retry_if_exception_type(_TRANSIENT),
            stop=lambda state: left_s() <= 0,
            # The last wait ends at the deadline, so the bound gets one more try.
            wait=lambda state: min(backoff(state), max(left_s(), 0.0)),
            before_sleep=say, reraise=True)
        try:
            return retrying(call, *args)
        except _TRANSIENT as err:
            tries = retrying.statistics.get("attempt_number", 1)
            raise self._outage(what, err, self._clock() - started, tries) from None

    def _outage(self, what: str, err: BaseException, waited_s: float, tries: int) -> StoreOutage:
        kept = len(self.journal.pending())
        # "0 finished results are kept in ... and are written back" named a folder to no end.
        journaled = (f"{counted(kept, 'finished result')} {'is' if kept == 1 else 'are'} kept in "
                     f"{self.journal.dir} and written back by the next `specfleet matrix "
                     "resume`, `specfleet db upgrade` or any command that stores runs on this "
                     "store") if kept else "no finished result waits in its journal"
        return StoreOutage(
            f"the store stayed unreachable for {waited_s:.0f} s ({counted(tries, 'try', 'tries')}"
            f"; could not {what}: {_short(err, FINAL_LIMIT)}); {journaled}"
        )


def table_writer(store: Any, on_wait: Callable[[str], None]) -> StoreWriter:
    """A writer for width-cost tables written outside a matrix (`calibrate --store`, `job
    calibrate`, `generate`'s measured table): retried for `SPECFLEET_STORE_RETRY_S`; no run
    is leased, so its lease is never renewed."""
    return StoreWriter(store, new_driver_id(), LEASE_S.default_s, STORE_RETRY_S.read(), on_wait)


def _short(err: BaseException | None, limit: int = 160) -> str:
    """The error in one line of at most about `limit` characters, its reason kept: first
    the advice after "; expected" goes, then the middle of its longest word (a store's
    path), and only then the middle of the text (`... port 5432 failed: Connection
    refused` keeps its end)."""
    text = " ".join(str(getattr(err, "orig", None) or err).split())
    if len(text) > limit:
        text = text.split("; expected ", 1)[0]
    over = len(text) - limit
    longest = max(text.split(), key=len, default="")
    if over > 0 and len(longest) - over - 1 >= MIN_WORD_KEPT:
        head = (len(longest) - over - 1) // 2
        tail = len(longest) - over - 1 - head
        text = text.replace(longest, f"{longest[:head]}…{longest[len(longest) - tail:]}", 1)
    if len(text) > limit:
        half = limit // 2
        text = f"{text[:half]} … {text[-half:]}"
    return text or type(err).__name__
