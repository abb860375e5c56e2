"""What the scheduler tells the user while a matrix runs: one progress bar per host on a
terminal, else one plain line per finished run and per wait (logs and CI see progress too)."""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Column

from specfleet.jobs.run import RunSpec


@dataclass(frozen=True)
class ProgressEvent:
    """One change of one run on one host.

    Attributes:
        host: the host name.
        run_key: the run that changed.
        status: "running", "done", "failed", "interrupted", "waiting" (for a quiet,
            unthrottled host), "leased" (a run not sent yet: another driver on this fleet
            holds the machine's lease), "queued" (a run sent, waiting for the machine lock:
            another specfleet process times a run on that machine), "behind" (a run sent,
            its worker still busy with another run: one whose driver was killed, or one cut
            loose), or news of the host
            itself (`HOST_NEWS`): "gave up" (waited `quiet_wait_s` and runs anyway, or
            waited `host_wait_s` for a host away), "unreachable" / "suspect" (its run was
            cut loose) or "back" (answers again).
        done: runs of this host done so far (this call).
        failed: runs of this host failed or interrupted so far.
        total: runs of this host this call set out to do.
        health: the host's `fleet.Health`.
        reason: why a "waiting" host waits (the worker's quiet check), who holds the machine
            a "leased" or "queued" run waits for (`lease_wait_reason`, `machine_wait_reason`),
            the run a "behind" run waits for (`busy_worker_reason`),
            why it "gave up", or why a run failed or was interrupted, else "".
        run: the run in words (`torch edit_fn graded rep 2`), "" when not about one run.
        tok_per_s: a done run's whole-call rate.
        late: the result of a run already reported `interrupted` (its host went silent)
            that came back after all: it replaces that outcome, it is not one more run.
    """

    host: str
    run_key: str
    status: str
    done: int
    failed: int
    total: int
    health: str
    reason: str = ""
    run: str = ""
    tok_per_s: float | None = None
    late: bool = False


ProgressCallback = Callable[[ProgressEvent], None]
STORE_LINE = "store"  # the `host` of events about the store itself (an outage being retried)
HOST_NEWS = ("gave up", "unreachable", "suspect", "back")  # a line about the host, no run
# What a host waits for, by its event's status (the words before the event's reason).
WAITS = {"waiting": "waiting for a quiet host", "leased": "waiting for the machine",
         "queued": "waiting for the machine lock", "behind": "waiting for its worker"}


def machine_wait_reason(held_by: str, waited_s: float) -> str:
    """`held by matrix bench-3fa9c2, pid 4242; waited 12 s`: a "queued" event's reason."""
    return f"held by {held_by or 'another specfleet process'}; waited {waited_s:.0f} s"


def busy_worker_reason(run_key: str, waited_s: float) -> str:
    """`busy with run 3fa9c2e1b7d0, not this one (...); waited 12 s`: a "behind" event's
    reason."""
    return (f"busy with run {run_key[:12]}, not this one (a run whose driver was stopped, or "
            f"one cut loose, goes on to its end); waited {waited_s:.0f} s")


def lease_wait_reason(refused: str, waited_s: float) -> str:
    """`leased to matrix bench-77aa01, pid 4242 on ws-3 (another driver); waited 12 s`: a
    "leased" event's reason (`refused`: `locks.Leases.refused`)."""
    return f"{refused}; waited {waited_s:.0f} s"


@dataclass
class LeaseWait:
    """One host's wait for a machine another driver holds (`matrix run`'s scheduler, `job
    calibrate`): since when, and the reason said last."""

    said: str = ""
    since: float | None = None

    def refused(self, refused: str, now: float) -> str:
        """Refused the machine's lease again (`refused`: whose turn it is): the reason to say
        now, or "" when it reads as it did (its waited seconds change once a second)."""
        if self.since is None:
            self.since = now
        reason = lease_wait_reason(refused, int(now - self.since))  # whole seconds
        if reason == self.said:
            return ""
        self.said = reason
        return reason

    def granted(self) -> None:
        """The lease is ours: the next wait is said from its start."""
        self.said, self.since = "", None


BAR_WIDTH = 20  # leaves an 80-column terminal room for the counts beside it


class HostProgress:
    """A rich progress bar per host (done / running / failed); a no-op when disabled."""

    def __init__(
        self, totals: dict[str, int], enabled: bool = True, console: Console | None = None
    ) -> None:
        self._enabled = enabled and bool(totals)
        self._progress: Progress | None = None
        self._tasks: dict[str, TaskID] = {}
        if self._enabled:
            self._progress = Progress(
                TextColumn("{task.fields[host]:<16}"),
                BarColumn(bar_width=BAR_WIDTH),
                MofNCompleteColumn(),
                # A long wait reason folds onto more lines: cut at 80 columns it named nobody.
                TextColumn("{task.fields[state]}", table_column=Column(overflow="fold")),
                TimeElapsedColumn(),
                console=console or Console(stderr=True),
                transient=False,
            )
            for host, total in sorted(totals.items()):
                self._tasks[host] = self._progress.add_task(
                    host, total=total, host=host, state="done 0  running 0  failed 0"
                )

    def __enter__(self) -> HostProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, event: ProgressEvent) -> None:
        if self._progress is not None and event.host == STORE_LINE:
            self._store_line(event.reason)
            return
        if self._progress is None or event.host not in self._tasks:
            return
        running = 1 if event.status == "running" else 0
        state = f"done {event.done}  running {running}  failed {event.failed}"
        if event.health != "healthy":
            state += f"  ({event.health})"
        if event.status == "waiting":
            state += f"  waiting: {event.reason}"
        elif event.status in WAITS:
            state += f"  {WAITS[event.status]}: {event.reason}"
        elif event.status in HOST_NEWS:
            state += f"  {event.reason}"
        self._progress.update(
            self._tasks[event.host], completed=event.done + event.failed, state=state
        )


    def _store_line(self, reason: str) -> None:
        assert self._progress is not None
        if STORE_LINE not in self._tasks:
            self._tasks[STORE_LINE] = self._progress.add_task(
                STORE_LINE, total=None, host=STORE_LINE, state="")
        self._progress.update(self._tasks[STORE_LINE], state=reason)


FINISHED = ("done", "failed", "interrupted")


class WaitingLines:
    """Lines on stderr (or `stream`) saying why a host (or the store) makes us wait, and a
    host's news (it stopped waiting at the bound, went unreachable, came back), where no
    progress bar shows them. A host's quiet check sends a new reason whenever its load
    figure moves, about once a second, and a run that waits for the machine (another
    driver's lease, another process's lock) its waited seconds: a wait is said at once, and
    again when its cause changes, else at most every `REPEAT_S` seconds while it lasts."""

    REPEAT_S = 10.0

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 stream: TextIO | None = None) -> None:
        self._clock = clock
        self._stream = stream
        # host -> when its current wait was last said, and its cause then (figures aside)
        self._said: dict[str, tuple[float, str]] = {}

    def __call__(self, event: ProgressEvent) -> None:
        if event.status == "waiting" and event.host == STORE_LINE:
            self._say(host_line(event))  # a store retry: seconds apart, counted
        elif event.status in WAITS:
            now = self._clock()
            cause = event.status + re.sub(r"[0-9.]+", "#", event.reason or "")
            when, said = self._said.get(event.host, (-self.REPEAT_S, ""))
            if cause == said and now - when < self.REPEAT_S:
                return
            self._said[event.host] = (now, cause)
            self._say(f"{event.host}: {WAITS[event.status]}: {event.reason}")
        else:
            self._said.pop(event.host, None)  # its next wait is said at once
            if event.status in HOST_NEWS:
                self._say(host_line(event))

    def _say(self, line: str) -> None:
        stream = self._stream or sys.stderr  # read at each line: a test may swap it
        stream.write(f"{line}\n")
        stream.flush()


class RunLines:
    """One plain line per finished run on `stream`: `[12/63] torch edit_fn graded rep 2:
    19.8 tok/s` (or the failure and its reason), and the `WaitingLines`; for logs, pipes
    and CI."""

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self._total = total
        self._finished = 0
        self._stream = stream
        self._waits = WaitingLines(stream=stream)  # waits, a host's news, store retries

    def update(self, event: ProgressEvent) -> None:
        self._waits(event)
        if event.status not in FINISHED or not event.run:
            return
        stream = self._stream or sys.stderr
        if event.status == "done":
            outcome = f"{event.tok_per_s or 0.0:.1f} tok/s"
        else:
            outcome = f"{event.status}: {event.reason}" if event.reason else event.status
        if event.late:  # settles a run already counted as interrupted
            said = f"{outcome} ({event.reason})" if event.status == "done" else outcome
            stream.write(f"[late] {event.run}: {said}\n")
        else:
            self._finished += 1
            stream.write(f"[{self._finished}/{self._total}] {event.run}: {outcome}\n")
        stream.flush()


def host_line(event: ProgressEvent) -> str:
    """`h2: unreachable: no answer for 8 s; ...`, `store: store unreachable ...`."""
    return f"{event.host}: {event.reason}"


def store_waiting(notify: ProgressCallback) -> Callable[[str], None]:
    """A `StoreWriter`'s `on_wait`: each retry of an unreachable store as a `store` event
    (a line, or the progress bars' `store` row)."""
    def say(reason: str) -> None:
        notify(ProgressEvent(STORE_LINE, "", "waiting", 0, 0, 0, "healthy", reason))

    return say


def progress_for(totals: dict[str, int], enabled: bool) -> tuple[HostProgress, RunLines | None]:
    """Bars on a terminal, plain lines without one (stderr), nothing when not `enabled`."""
    if enabled and not sys.stderr.isatty():
        return HostProgress(totals, enabled=False), RunLines(sum(totals.values()))
    return HostProgress(totals, enabled=enabled), None


def fan_out(callbacks: Iterable[ProgressCallback | None]) -> ProgressCallback:
    """One callback that calls each given one in turn."""
    live = [cb for cb in callbacks if cb is not None]

    def call(event: ProgressEvent) -> None:
        for cb in live:
            cb(event)

    return call


def run_words(spec: RunSpec, name_hosts: bool, name_models: bool) -> str:
    """A run as progress lines name it: `torch edit_fn graded rep 1` (the stored repeat, from
    0, as `results` and `matrix status` show it), host and model when they vary; a generation
    job's run (no matrix), which has no repeats, without `rep`: `torch line-2 auto`."""
    where = f"{spec.target.host}/{spec.target.engine}" if name_hosts else spec.target.engine
    model = f" {spec.model}" if name_models else ""
    repeat = f" rep {spec.repeat}" if owner_kind(spec) == "matrix" else ""
    return f"{where}{model} {spec.prompt_name} {spec.arm}{repeat}"


def owner_kind(spec: RunSpec) -> str:
    """What a run belongs to, as lines name it: "matrix", or "job" (a generation job's runs
    have no matrix)."""
    return "matrix" if spec.matrix_id is not None else "job"


def resumed_by(spec: RunSpec) -> str:
    """The command that runs `spec` again once it is interrupted: a matrix's or a job's."""
    return f"{owner_kind(spec)} resume"
