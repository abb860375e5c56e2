"""What the scheduler tells the user while a matrix runs: one progress bar per host."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


@dataclass(frozen=True)
class ProgressEvent:
    """One change of one run on one host.

    Attributes:
        host: the host name.
        run_key: the run that changed.
        status: "running", "done", "failed", "interrupted", "waiting" (for a quiet,
            unthrottled host) or "gave up" (waited `quiet_wait_s`; runs anyway).
        done: runs of this host done so far (this call).
        failed: runs of this host failed or interrupted so far.
        total: runs of this host this call set out to do.
        health: "healthy", "suspect" or "dead".
        reason: why a "waiting" host waits (the worker's quiet check), or why it "gave up".
    """

    host: str
    run_key: str
    status: str
    done: int
    failed: int
    total: int
    health: str
    reason: str = ""


ProgressCallback = Callable[[ProgressEvent], None]


class HostProgress:
    """A rich progress bar per host (done / running / failed); a no-op when disabled."""

    def __init__(
        self, totals: dict[str, int], enabled: bool = True, console: Console | None = None
    ) -> None:
        self._enabled = enabled and bool(totals)
        self._progress: Progress | None = None
        self._tasks: dict[str, int] = {}
        if self._enabled:
            self._progress = Progress(
                TextColumn("{task.fields[host]:<16}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[state]}"),
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
        if self._progress is None or event.host not in self._tasks:
            return
        running = 1 if event.status == "running" else 0
        state = f"done {event.done}  running {running}  failed {event.failed}"
        if event.health != "healthy":
            state += f"  ({event.health})"
        if event.status == "waiting":
            state += f"  waiting: {event.reason}"
        elif event.status == "gave up":
            state += f"  {event.reason}"
        self._progress.update(
            self._tasks[event.host], completed=event.done + event.failed, state=state
        )


def fan_out(callbacks: Iterable[ProgressCallback | None]) -> ProgressCallback:
    """One callback that calls each given one in turn."""
    live = [cb for cb in callbacks if cb is not None]

    def call(event: ProgressEvent) -> None:
        for cb in live:
            cb(event)

    return call
