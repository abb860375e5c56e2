"""The quiet check a worker runs before each timed run: how many cores other processes
keep busy, and whether that is few enough to time a run.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

# A host is quiet when processes other than ours keep fewer than this many cores busy per
# core it has (0.25 on 8 cores: under 2 cores' worth of foreign work). The 1-minute load
# average is not used for this: it still carries our own previous run for a minute.
QUIET_BUSY_PER_CORE = 0.25


@dataclass(frozen=True)
class QuietCheck:
    """Whether a host is quiet enough for a timed run, and why not."""

    quiet: bool
    foreign_busy_cores: float  # cores kept busy by processes other than this one
    threshold_cores: float
    reason: str


class ForeignCpuMeter:
    """Measures how many cores processes other than this one keep busy.

    Call `update()` now and then (the worker's sampler thread does, every second); `check()`
    reads the last window at once, so a quiet check costs no waiting between runs.

    Args:
        pids: only these processes count (tests on a shared machine); default: all but ours.
    """

    def __init__(self, pids: Sequence[int] | None = None) -> None:
        self._proc = psutil.Process()
        self._pids = tuple(pids) if pids is not None else None
        self._last = self._snapshot()
        self._busy_cores: float | None = None

    def _snapshot(self) -> tuple[float, float, float | dict[int, float]]:
        if self._pids is not None:
            return (time.monotonic(), 0.0, _cpu_seconds(self._pids))
        sys_t = psutil.cpu_times()
        busy_s = sum(sys_t) - sys_t.idle - getattr(sys_t, "iowait", 0.0)
        own = self._proc.cpu_times()
        return (time.monotonic(), busy_s, own.user + own.system)

    def update(self, min_window_s: float = 0.2) -> float:
        """Close the current window (waiting until it is `min_window_s` long); return busy cores."""
        wait_s = min_window_s - (time.monotonic() - self._last[0])
        if wait_s > 0:
            time.sleep(wait_s)
        now = self._snapshot()
        elapsed_s = max(now[0] - self._last[0], 1e-6)
        before, after = self._last[2], now[2]
        foreign_s: float
        if self._pids is not None:  # watched processes alive at both ends of the window
            assert isinstance(before, dict) and isinstance(after, dict)  # per-pid snapshots
            foreign_s = sum(after[pid] - before[pid] for pid in after if pid in before)
        else:
            assert not isinstance(before, dict) and not isinstance(after, dict)  # own seconds
            foreign_s = (now[1] - self._last[1]) - (after - before)
        self._busy_cores = max(foreign_s, 0.0) / elapsed_s
        self._last = now
        return self._busy_cores

    def check(
        self, threshold_per_core: float = QUIET_BUSY_PER_CORE, fresh: bool = False
    ) -> QuietCheck:
        """Quiet when foreign busy cores < threshold_per_core x cores (see QUIET_BUSY_PER_CORE).

        Args:
            threshold_per_core: busy cores allowed per core.
            fresh: first close the current window when it is at least 0.2 s long (no wait).
        """
        stale = time.monotonic() - self._last[0] >= 0.2
        if self._busy_cores is None or (fresh and stale):
            self.update()
        busy = self._busy_cores or 0.0
        # Every CPU of the machine, not this process's affinity: the busy cores are machine-wide.
        limit = threshold_per_core * (os.cpu_count() or 1)
        reason = (
            ""
            if busy < limit
            else f"other processes keep {busy:.2f} cores busy (limit {limit:.2f})"
        )
        return QuietCheck(busy < limit, round(busy, 3), round(limit, 3), reason)


def _cpu_seconds(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds (user + system) of each live process among `pids`; gone ones are left out."""
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            out[pid] = sum(psutil.Process(pid).cpu_times()[:2])
    return out


def is_quiet(threshold_per_core: float = QUIET_BUSY_PER_CORE, window_s: float = 0.5) -> bool:
    """Whether other processes keep fewer than `threshold_per_core` x cores busy over `window_s`.

    Args:
        threshold_per_core: busy cores allowed per core (default QUIET_BUSY_PER_CORE = 0.25).
        window_s: how long to measure.

    Returns:
        True when the host is quiet.
    """
    meter = ForeignCpuMeter()
    meter.update(window_s)
    return meter.check(threshold_per_core).quiet
