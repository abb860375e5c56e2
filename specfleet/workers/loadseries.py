"""A worker's load series: a background thread that samples the host while a run is going.

Every `tick_s` it closes a window of the foreign-CPU meter (so the quiet check before a run
costs no waiting), and while a run is in progress it records a `LoadReading` every `period_s`
(load average 1/5/15, CPU %, GPU %). The worker drains the samples into the store.
`sample_load` and `load_average` read the host's load now.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

import psutil

from specfleet.workers.conditions.nvidia import read_utilization
from specfleet.workers.conditions.sample import run_tool
from specfleet.workers.quiet import ForeignCpuMeter

LOAD_SAMPLE_PERIOD_S = 5.0
_MAX_SAMPLES = 10_000


@dataclass(frozen=True)
class LoadReading:
    """One point of a host's load series (stored per host and matrix)."""

    at: float  # unix time
    load_1m: float
    load_5m: float
    load_15m: float
    cpu_percent: float  # whole machine, 0-100
    gpu_util_percent: float | None  # first NVIDIA GPU, None without nvidia-smi


def load_average() -> tuple[float, float, float]:
    """The 1/5/15-minute load averages."""
    one, five, fifteen = os.getloadavg()
    return (round(one, 3), round(five, 3), round(fifteen, 3))


def gpu_utilization() -> float | None:
    """Utilisation of the first NVIDIA GPU in percent, None when there is none."""
    util = read_utilization(run_tool)
    return util[min(util)] if util else None


def sample_load() -> LoadReading:
    """Sample load average, CPU (since the previous call) and GPU utilisation now."""
    return LoadReading(
        time.time(), *load_average(), psutil.cpu_percent(interval=None), gpu_utilization()
    )


class LoadSeries:
    """Samples of one host, taken while `current_run()` names a run.

    Args:
        host: host name written into each sample.
        current_run: returns the run key in progress, or None when idle.
        meter: the foreign-CPU meter to keep fresh.
        period_s: seconds between samples while busy.
        tick_s: how often the thread wakes.
    """

    def __init__(
        self,
        host: str,
        current_run: Callable[[], str | None],
        meter: ForeignCpuMeter,
        period_s: float = LOAD_SAMPLE_PERIOD_S,
        tick_s: float = 1.0,
    ) -> None:
        self._host = host
        self._current_run = current_run
        self._meter = meter
        self._period_s = period_s
        self._tick_s = tick_s
        self._samples: deque[dict] = deque(maxlen=_MAX_SAMPLES)
        self._last_at = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="load-sampler", daemon=True)
        self._thread.start()

    def maybe_sample(self, run_key: str) -> None:
        """Record a sample for `run_key` unless one was taken within the period."""
        if time.monotonic() - self._last_at < self._period_s:
            return
        self._last_at = time.monotonic()
        sample = asdict(sample_load())
        sample.update(host=self._host, run_key=run_key, busy=True)
        self._samples.append(sample)

    def drain(self) -> list[dict]:
        """The samples taken since the last drain (oldest first), then forgotten."""
        out = []
        while self._samples:
            out.append(self._samples.popleft())
        return out

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self._tick_s):
            self._meter.update(min_window_s=0.0)
            run_key = self._current_run()
            if run_key is not None:
                self.maybe_sample(run_key)
