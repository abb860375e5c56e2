"""The memory probes of a worker: the host's at its start and again before its first quiet
run (bounded, positive, the faster kept), a GPU's own before that device's first run."""

from __future__ import annotations

import time
from dataclasses import replace

from specfleet.jobs.run import RunSpec, Target
from specfleet.workers.bandwidth import (
    ReadBandwidth,
    measure_device_read_gb_per_s,
    measure_read_gb_per_s,
    timed_reads,
)


def test_probe_is_positive_and_its_budget_bounds_the_passes(monkeypatch):
    import numpy as np

    sums = []
    real_sum = np.sum
    monkeypatch.setattr(np, "sum", lambda chunk: sums.append(1) or real_sum(chunk))
    assert measure_read_gb_per_s(buffer_mb=16, passes=3, budget_s=60.0, threads=1) > 0
    assert len(sums) == 3  # one reader thread: one sum a pass
    sums.clear()
    assert measure_read_gb_per_s(buffer_mb=16, passes=5, budget_s=0.0, threads=1) > 0
    assert len(sums) == 1  # the budget spent (the fill counts): one pass, however fast the box


def test_a_worker_that_ran_no_real_model_has_probed_nothing(tmp_path):
    from specfleet.workers.hardware import detect_host
    from specfleet.workers.host import HostWorker

    # Not at the start (Ray's processes still starting slow the probe), nor for a toy run.
    worker = HostWorker("bw1", self_test=False, sample_period_s=3600.0, kept_dir=tmp_path,
                        run_lock_path=str(tmp_path / "run.lock"))
    try:
        assert worker.info()["read_gb_per_s"] is None
        result = worker.run(RunSpec(
            run_key="toy", target=Target(host="bw1", engine="toy", device="cpu"),
            model="script", prompt_name="p", prompt_text="abcabc", arm="plain", max_tokens=2))
        info = worker.info()
    finally:
        worker.close()
    assert result.status == "done", result.error
    assert info["read_gb_per_s"] is None and worker._bandwidth._probed == set()
    host = detect_host("bw1")
    assert replace(host, read_gb_per_s=1.0).fingerprint == replace(host, read_gb_per_s=2.0).fingerprint
    assert host.fingerprint == info["fingerprint"]


def test_worker_probes_again_once_before_its_first_quiet_run_keeping_the_faster():
    at_start = measure_read_gb_per_s()
    bandwidth = ReadBandwidth(0.001)  # as read by a first run on a busy host
    bandwidth.probe_once("torch", "cpu")
    again = bandwidth.host_gb_per_s
    assert again > 0.001 and again > at_start / 10
    bandwidth.host_gb_per_s = 0.002
    bandwidth.probe_once("torch", "cpu")  # once per worker: no second probe
    bandwidth.probe_once("mlx", "cpu")  # one host
    assert bandwidth.host_gb_per_s == 0.002
    bandwidth.host_gb_per_s = 1e6
    bandwidth._probed.clear()
    bandwidth.probe_once("torch", "cpu")  # a slower probe never lowers it
    assert bandwidth.host_gb_per_s == 1e6
    assert bandwidth.of("torch", "cpu") == 1e6
    # A device this host lacks: its probe cannot run, and that is no figure (not a crash).
    bandwidth.probe_once("torch", "cuda")
    assert bandwidth.of("torch", "cuda") is None


def test_the_first_real_run_probes_the_host_even_when_busy_and_a_quiet_one_again(monkeypatch):
    from specfleet.workers import bandwidth as bandwidth_mod

    readings = iter([20.0, 35.0, 30.0])
    monkeypatch.setattr(bandwidth_mod, "measure_read_gb_per_s", lambda: next(readings))
    bandwidth = ReadBandwidth()
    assert bandwidth.of("torch", "cpu") is None
    bandwidth.before_run("torch", "cpu", quiet=False)  # busy: a figure all the same
    assert bandwidth.of("torch", "cpu") == 20.0
    bandwidth.before_run("torch", "cpu", quiet=False)  # no probe while busy once it has one
    assert bandwidth.of("torch", "cpu") == 20.0
    bandwidth.before_run("torch", "cpu", quiet=True)  # the first quiet run: again, faster kept
    assert bandwidth.of("torch", "cpu") == 35.0
    bandwidth.before_run("mlx", "cpu", quiet=True)  # one host, probed once quiet
    assert bandwidth.of("mlx", "cpu") == 35.0


def test_a_real_models_run_stores_the_bandwidth_its_worker_read(tmp_path):
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
    assert worker._bandwidth._probed == {("host", "cpu")}


def test_device_probe_times_waited_reads_and_leaves_the_host_to_its_own_probe():
    assert measure_device_read_gb_per_s("torch", "cpu") is None
    assert measure_device_read_gb_per_s("mlx", "cpu") is None
    calls = []

    def read() -> None:  # 2 GB in 0.01 s: 200 GB/s, whatever the box
        calls.append(time.perf_counter())
        time.sleep(0.01)

    rate = timed_reads(read, 2_000_000_000, passes=5, budget_s=10.0)
    assert len(calls) == 6  # one untimed first, then the passes
    assert 100 < rate <= 200  # a sleep is never shorter than asked
    calls.clear()
    timed_reads(read, 1, passes=1000, budget_s=0.05)  # the budget stops it
    # each call sleeps at least 0.01 s: past 0.05 s after at most 5, then one more pass
    assert 2 <= len(calls) <= 6
    calls.clear()
    timed_reads(read, 1, passes=1000, budget_s=0.0)
    assert len(calls) == 2  # the untimed call, then one pass however fast the box


def test_the_mlx_reader_sums_its_buffer_on_the_device_it_is_given():
    # The Metal path reads on mx.gpu; here MLX runs on its CPU backend only.
    import mlx.core as mx

    from specfleet.workers.bandwidth import _mlx_reader

    read, nbytes = _mlx_reader(mx.cpu, 4)
    assert nbytes == 4 * 2**20 and read().item() == nbytes // 4  # a sum of ones
    assert timed_reads(read, nbytes, passes=3, budget_s=1.0) > 0


def test_the_torch_device_probe_runs_its_read_to_the_end():
    # CUDA and MPS are not on this box: the same code on a CPU tensor, the wait a no-op.
    from specfleet.workers import bandwidth

    assert bandwidth._torch_device_reads("cpu", 8, 3, 1.0) > 0
