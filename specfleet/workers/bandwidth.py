"""How fast this host, or an accelerator on it, reads memory: the probes a worker runs.

Plain decoding reads every weight once per token, so read bandwidth / weight bytes is the
fastest plain decode a host could reach (docs/trust.md, "Plain decoding against the machine's
limit"). The host probe sums a buffer larger than any last-level cache, split across one
thread per core (numpy releases the GIL in a reduction), a few passes, and keeps the median
pass. A device probe (a CUDA GPU, Apple's GPU through Metal or MPS) sums a buffer on the
device with the engine's own kernels, the way a plain step reads weights there.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from specfleet.settings import logical_cpus

PROBE_BUFFER_MB = 256  # over twice the largest last-level caches of the hosts we run on
PROBE_PASSES = 5
PROBE_BUDGET_S = 1.5  # passes stop once this is spent (at least one pass always runs)
# Over eight times the largest GPU L2 caches of the hosts we run on (H200: 50 MB; GB10 and
# Apple's GPUs: less), small beside their memory.
DEVICE_PROBE_MB = 512
DEVICE_PASSES = 9


class ReadBandwidth:
    """What a worker knows of read bandwidth: the host memory's, probed before the worker's
    first run of a real model and, if that run failed the quiet check, once more before its
    first quiet one, the faster kept (noise only slows a probe); and an accelerator's own
    memory, probed before its first quiet run. Not at the worker's start: Ray's own processes
    are still starting there (on a 2-core box the probe read 20.9 GB/s, 35 on its own), and a
    worker that only runs toy targets never needs the figure.

    Args:
        host_gb_per_s: a host figure already read (None: not yet probed).
    """

    def __init__(self, host_gb_per_s: float | None = None) -> None:
        self.host_gb_per_s = host_gb_per_s
        self._probed: set[tuple[str, str]] = set()
        self._device: dict[tuple[str, str], float] = {}  # (engine, device) -> GB/s

    def before_run(self, engine: str, device: str, quiet: bool) -> None:
        """Before a real model's run: the memory the target reads probed once when the host
        is quiet (`probe_once`), and the host probed if it never was (busy, or the target's
        memory is a device's)."""
        if quiet:
            self.probe_once(engine, device)
        if self.host_gb_per_s is None:
            self.host_gb_per_s = measure_read_gb_per_s()

    def probe_once(self, engine: str, device: str) -> None:
        """Probe the memory a target on (`engine`, `device`) reads weights from, the first
        time only: the host's for a CPU target, else the device's own."""
        key = ("host", "cpu") if device == "cpu" else (engine, device)
        if key in self._probed:
            return
        self._probed.add(key)
        if device == "cpu":
            self.host_gb_per_s = max(measure_read_gb_per_s(), self.host_gb_per_s or 0.0)
            return
        try:
            device_gb = measure_device_read_gb_per_s(engine, device)
        except Exception:  # noqa: BLE001 - a probe that cannot run (no memory left) is no figure
            device_gb = None
        if device_gb:
            self._device[key] = device_gb

    def of(self, engine: str, device: str) -> float | None:
        """The read bandwidth of the memory a target decodes from, as last probed."""
        return self.host_gb_per_s if device == "cpu" else self._device.get((engine, device))


def measure_read_gb_per_s(
    buffer_mb: int = PROBE_BUFFER_MB, passes: int = PROBE_PASSES,
    budget_s: float = PROBE_BUDGET_S, threads: int | None = None,
) -> float:
    """This host's memory read bandwidth in GB/s (10^9 bytes), median over the passes.

    Args:
        buffer_mb: the buffer read each pass (MiB).
        passes: passes at most; fewer when `budget_s` runs out (the fill counts too).
        budget_s: the wall-clock bound of the whole probe, allocation included, give or
            take one pass.
        threads: reader threads (default: one per CPU this process may run on).

    Returns:
        The median pass's bytes / seconds, in GB/s.
    """
    start = time.perf_counter()
    buffer = np.ones(buffer_mb * 2**20 // 8, dtype=np.int64)  # ones: every page touched
    workers = threads or logical_cpus()  # a reader per CPU it may run on (taskset honoured)
    chunks = np.array_split(buffer, workers)
    rates = []
    with ThreadPoolExecutor(workers) as pool:
        for _ in range(passes):
            begin = time.perf_counter()
            list(pool.map(np.sum, chunks))  # integer sums vectorise: the read is the cost
            rates.append(buffer.nbytes / (time.perf_counter() - begin) / 1e9)
            if time.perf_counter() - start > budget_s:
                break
    return round(statistics.median(rates), 2)


def measure_device_read_gb_per_s(
    engine: str, device: str, buffer_mb: int = DEVICE_PROBE_MB, passes: int = DEVICE_PASSES,
    budget_s: float = PROBE_BUDGET_S,
) -> float | None:
    """The read bandwidth of `device` in GB/s as `engine` reads it: the median of timed sums
    of a float32 buffer on the device, each waited for; None for "cpu" (the host probe,
    `measure_read_gb_per_s`, is its figure) and for a device the engine does not offer.

    Args:
        engine: "torch" or "mlx".
        device: the target's device ("cuda", "mps" for torch; "metal", "cuda" for MLX).
        buffer_mb, passes, budget_s: as `measure_read_gb_per_s`; one untimed sum first.
    """
    if device == "cpu":
        return None
    if engine == "torch":
        return _torch_device_reads(device, buffer_mb, passes, budget_s)
    if engine == "mlx":
        import mlx.core as mx

        return timed_reads(*_mlx_reader(mx.gpu, buffer_mb), passes, budget_s)
    return None


def _torch_device_reads(device: str, buffer_mb: int, passes: int, budget_s: float) -> float:
    import torch

    # The device's own wait: a sum returns before the GPU has read anything.
    sync = {"cuda": torch.cuda.synchronize, "mps": torch.mps.synchronize}.get(
        device, lambda: None)
    held = [torch.ones(buffer_mb * 2**20 // 4, dtype=torch.float32, device=device)]

    def read() -> Any:
        total = held[0].sum()
        sync()
        return total

    try:
        return timed_reads(read, held[0].numel() * 4, passes, budget_s)
    finally:
        held.clear()
        if device == "cuda":
            torch.cuda.empty_cache()  # the probe's half gigabyte is not the model's to keep


def _mlx_reader(device: Any, buffer_mb: int) -> tuple[Callable[[], Any], int]:
    """A sum of a float32 buffer on MLX's `device`, evaluated (MLX is lazy), and its bytes."""
    import mlx.core as mx

    buffer = mx.ones((buffer_mb * 2**20 // 4,), dtype=mx.float32, stream=device)
    mx.eval(buffer)

    def read() -> Any:
        total = mx.sum(buffer, stream=device)
        mx.eval(total)
        return total

    return read, buffer.nbytes


def timed_reads(read: Callable[[], Any], nbytes: int, passes: int, budget_s: float) -> float:
    """GB/s of the median of up to `passes` timed calls of `read` (each reads `nbytes` and
    returns once done), within `budget_s` give or take one pass, after one untimed call
    (kernels compile and caches fill on the first)."""
    start = time.perf_counter()
    read()
    rates = []
    for _ in range(passes):
        begin = time.perf_counter()
        read()
        rates.append(nbytes / (time.perf_counter() - begin) / 1e9)
        if time.perf_counter() - start > budget_s:
            break
    return round(statistics.median(rates), 2)
