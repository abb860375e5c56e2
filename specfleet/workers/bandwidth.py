"""How fast this host reads memory: the probe a worker runs once when it starts.

Plain decoding reads every weight once per token, so read bandwidth / weight bytes is the
fastest plain decode a host could reach (docs/trust.md, "Plain decoding against the machine's
limit"). The probe sums a buffer larger than any last-level cache, split across one thread per
core (numpy releases the GIL in a reduction), a few passes, and keeps the median pass.
"""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

PROBE_BUFFER_MB = 256  # over twice the largest last-level caches of the hosts we run on
PROBE_PASSES = 5
PROBE_BUDGET_S = 1.5  # passes stop once this is spent (at least one pass always runs)


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
        threads: reader threads (default: one per core).

    Returns:
        The median pass's bytes / seconds, in GB/s.
    """
    start = time.perf_counter()
    buffer = np.ones(buffer_mb * 2**20 // 8, dtype=np.int64)  # ones: every page touched
    workers = threads or os.cpu_count() or 1
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
