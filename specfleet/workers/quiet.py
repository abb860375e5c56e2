"""The quiet check a worker runs before each timed run: how many cores other processes
keep busy, and whether an NVIDIA GPU is busy while this worker runs no job; whether that is
little enough to time a run.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import psutil

from specfleet.workers.conditions.nvidia import read_utilization
from specfleet.workers.conditions.sample import run_tool

# A host is quiet when processes other than ours keep fewer than this many cores busy per
# core it has (0.25 on 8 cores: under 2 cores' worth of foreign work). The 1-minute load
# average is not used for this: it still carries our own previous run for a minute.
QUIET_BUSY_PER_CORE = 0.25
# ... and no GPU is busier than this (NVIDIA utilization: the share of the driver's last
# sample period, 1/6 to 1 s, in which a kernel ran); an idle GPU reads 0-2%.
QUIET_GPU_UTIL_PERCENT = 10.0
# Utilization is one figure per GPU, our own kernels in it: it counts only once this process
# has kept under OWN_BUSY_CORES busy for OWN_IDLE_S, twice the longest sample period (a run
# or its warm-up keeps a core busy driving the GPU; an idle worker, reads included, a few
# percent), so our own run, warm-up or the tail of the previous run is never taken for
# another job.
OWN_BUSY_CORES = 0.5
OWN_IDLE_S = 2.0

GpuUtil = Callable[[], dict[int, float]]  # GPU index -> utilization %, {} when unreadable


@dataclass(frozen=True)
class QuietCheck:
    """Whether a host is quiet enough for a timed run, and why not."""

    quiet: bool
    foreign_busy_cores: float  # cores kept busy by processes other than this one
    threshold_cores: float
    reason: str
    gpu_util_percent: float | None = None  # the busiest GPU's; None: not read (see above)


class _Snapshot(NamedTuple):
    at: float  # monotonic seconds
    busy_s: float  # the machine's busy CPU seconds (0.0 when watching given processes)
    own_s: float  # this process's CPU seconds
    pids: dict[int, float] | None  # each watched process's CPU seconds


def _gpu_util_now() -> dict[int, float]:
    return read_utilization(run_tool)


class ForeignCpuMeter:
    """Measures how many cores processes other than this one keep busy.

    Call `update()` now and then (the worker's sampler thread does, every second); `check()`
    reads the last window at once, so a quiet check costs no waiting between runs.

    Args:
        pids: only these processes count (tests on a shared machine); default: all but ours.
        gpu_util: each GPU's utilization now; default: NVIDIA's (NVML, else nvidia-smi) when
            the whole machine is watched, none with `pids` (a GPU's figure is machine-wide).
    """

    def __init__(self, pids: Sequence[int] | None = None, gpu_util: GpuUtil | None = None) -> None:
        self._proc = psutil.Process()
        self._pids = tuple(pids) if pids is not None else None
        self._gpu_util = gpu_util if gpu_util is not None or pids is not None else _gpu_util_now
        self._last = self._snapshot()
        self._busy_cores: float | None = None
        self._own_busy_at = -math.inf  # end of the last window this process kept busy

    def _own_s(self) -> float:
        own = self._proc.cpu_times()
        return own.user + own.system

    def _snapshot(self) -> _Snapshot:
        if self._pids is not None:
            return _Snapshot(time.monotonic(), 0.0, self._own_s(), _cpu_seconds(self._pids))
        sys_t = psutil.cpu_times()
        busy_s = sum(sys_t) - sys_t.idle - getattr(sys_t, "iowait", 0.0)
        return _Snapshot(time.monotonic(), busy_s, self._own_s(), None)

    def update(self, min_window_s: float = 0.2) -> float:
        """Close the current window (waiting until it is `min_window_s` long); return busy cores."""
        wait_s = min_window_s - (time.monotonic() - self._last.at)
        if wait_s > 0:
            time.sleep(wait_s)
        now, last = self._snapshot(), self._last
        elapsed_s = max(now.at - last.at, 1e-6)
        own_s = now.own_s - last.own_s
        if now.pids is not None and last.pids is not None:  # watched ones alive at both ends
            foreign_s = sum(now.pids[pid] - last.pids[pid] for pid in now.pids if pid in last.pids)
        else:
            foreign_s = (now.busy_s - last.busy_s) - own_s
        if own_s >= OWN_BUSY_CORES * elapsed_s:
            self._own_busy_at = now.at
        self._busy_cores = max(foreign_s, 0.0) / elapsed_s
        self._last = now
        return self._busy_cores

    def check(
        self, threshold_per_core: float = QUIET_BUSY_PER_CORE, fresh: bool = False
    ) -> QuietCheck:
        """Quiet when foreign busy cores < threshold_per_core x cores (see QUIET_BUSY_PER_CORE)
        and, where a GPU's utilization is read, none is above QUIET_GPU_UTIL_PERCENT.

        Args:
            threshold_per_core: busy cores allowed per core.
            fresh: first close the current window when it is at least 0.2 s long (no wait).
        """
        stale = time.monotonic() - self._last.at >= 0.2
        if self._busy_cores is None or (fresh and stale):
            self.update()
        busy = self._busy_cores or 0.0
        # Every CPU of the machine, not this process's affinity: the busy cores are machine-wide.
        limit = threshold_per_core * (os.cpu_count() or 1)
        reasons = []
        if busy >= limit:
            reasons.append(f"other processes keep {busy:.2f} cores busy (limit {limit:.2f})")
        gpu = self._busiest_gpu()
        if gpu is not None and gpu[1] > QUIET_GPU_UTIL_PERCENT:
            reasons.append(f"GPU {gpu[0]} {gpu[1]:.0f}% busy while this worker runs no job "
                           f"(limit {QUIET_GPU_UTIL_PERCENT:.0f}%)")
        return QuietCheck(not reasons, round(busy, 3), round(limit, 3), "; ".join(reasons),
                          None if gpu is None else gpu[1])

    def _busiest_gpu(self) -> tuple[int, float] | None:
        """(index, utilization %) of the busiest GPU; None when there is no reading, or this
        process was busy within OWN_IDLE_S (the window still open included)."""
        if self._gpu_util is None:
            return None
        now = time.monotonic()
        open_s = max(now - self._last.at, 0.2)  # cpu_times counts in 10 ms ticks
        if (self._own_s() - self._last.own_s >= OWN_BUSY_CORES * open_s
                or now - self._own_busy_at < OWN_IDLE_S):
            return None
        util = self._gpu_util()
        return max(util.items(), key=lambda item: item[1]) if util else None


def _cpu_seconds(pids: Sequence[int]) -> dict[int, float]:
    """CPU seconds (user + system) of each live process among `pids`; gone ones are left out."""
    out = {}
    for pid in pids:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            out[pid] = sum(psutil.Process(pid).cpu_times()[:2])
    return out


def is_quiet(threshold_per_core: float = QUIET_BUSY_PER_CORE, window_s: float = 0.5) -> bool:
    """Whether other processes keep fewer than `threshold_per_core` x cores busy over `window_s`
    and no GPU is busier than QUIET_GPU_UTIL_PERCENT.

    Args:
        threshold_per_core: busy cores allowed per core (default QUIET_BUSY_PER_CORE = 0.25).
        window_s: how long to measure.

    Returns:
        True when the host is quiet.
    """
    meter = ForeignCpuMeter()
    meter.update(window_s)
    return meter.check(threshold_per_core).quiet
