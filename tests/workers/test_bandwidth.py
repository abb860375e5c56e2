"""The memory read probe a worker runs when it starts: bounded and positive."""

from __future__ import annotations

import time
from dataclasses import replace

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


def test_worker_probes_again_once_before_its_first_quiet_run_keeping_the_faster(tmp_path):
    from specfleet.workers.host import HostWorker

    worker = HostWorker("bw2", self_test=False, sample_period_s=3600.0, kept_dir=tmp_path)
    try:
        at_start = worker.info()["read_gb_per_s"]
        worker._info = replace(worker._info, read_gb_per_s=0.001)  # as read under Ray's start
        worker._probe_bandwidth_once_quiet()
        again = worker.info()["read_gb_per_s"]
        assert again > 0.001 and again > at_start / 10
        worker._info = replace(worker._info, read_gb_per_s=0.002)
        worker._probe_bandwidth_once_quiet()  # once per worker: no second probe
        assert worker.info()["read_gb_per_s"] == 0.002
        worker._info = replace(worker._info, read_gb_per_s=1e6)
        worker._bandwidth_probed_quiet = False
        worker._probe_bandwidth_once_quiet()  # a slower probe never lowers it
        assert worker.info()["read_gb_per_s"] == 1e6
    finally:
        worker.close()


def test_a_real_models_run_stores_the_bandwidth_its_worker_read(tmp_path):
    from specfleet.jobs.run import RunSpec, Target
    from specfleet.workers.host import HostWorker

    worker = HostWorker("bw3", self_test=False, sample_period_s=3600.0, kept_dir=tmp_path,
                        engines=["torch"], quiet_threshold_per_core=1000.0,
                        run_lock_path=str(tmp_path / "run.lock"))
    try:
        result = worker.run(RunSpec(
            run_key="bw", target=Target(host="bw3", engine="torch", device="cpu"),
            model="smollm2-135m", prompt_name="p", prompt_text="Hello", arm="plain",
            max_tokens=2))
    finally:
        worker.close()
    assert result.status == "done", result.error
    assert result.engine_config["read_gb_per_s"] == worker._info.read_gb_per_s > 0
    assert worker._bandwidth_probed_quiet
