"""The memory read probe a worker runs when it starts: bounded and positive."""

from __future__ import annotations

import time

from specfleet.workers.bandwidth import measure_read_gb_per_s


def test_probe_is_positive_and_stops_within_its_budget():
    start = time.perf_counter()
    rate = measure_read_gb_per_s(buffer_mb=64, passes=50, budget_s=0.3)
    elapsed = time.perf_counter() - start
    assert rate > 0
    # the budget, plus one pass of 64 MB at a pessimistic 0.2 GB/s on a loaded box
    assert elapsed < 0.3 + 64 * 2**20 / 0.2e9 + 0.5


def test_default_probe_stays_under_two_seconds_of_reading():
    start = time.perf_counter()
    assert measure_read_gb_per_s(threads=1) > 0
    assert time.perf_counter() - start < 3.0  # 1.5 s budget + one 256 MB pass, loaded box


def test_worker_measures_at_start_and_the_fingerprint_ignores_it(tmp_path):
    from dataclasses import replace

    from specfleet.workers.hardware import detect_host
    from specfleet.workers.host import HostWorker

    worker = HostWorker("bw1", self_test=False, sample_period_s=3600.0, kept_dir=tmp_path)
    try:
        info = worker.info()
    finally:
        worker.close()
    assert info["read_gb_per_s"] > 0
    host = detect_host("bw1")
    assert replace(host, read_gb_per_s=1.0).fingerprint == replace(host, read_gb_per_s=2.0).fingerprint
    assert host.fingerprint == info["fingerprint"]
