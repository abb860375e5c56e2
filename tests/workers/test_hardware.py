"""Host detection and load sampling on this machine (Linux CPU here; probes stay cheap)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from specfleet.workers.hardware import HostInfo, detect_host, host_kind
from specfleet.workers.loadseries import load_average, sample_load
from specfleet.workers.quiet import ForeignCpuMeter, is_quiet


@pytest.fixture(scope="module")
def host() -> HostInfo:
    return detect_host("box1")


def test_detect_host_describes_this_machine(host: HostInfo) -> None:
    assert host.name == "box1"
    assert host.cpu_count == os.cpu_count()
    assert host.memory_gb > 0.5
    assert host.os == sys.platform.replace("linux", "linux")
    assert host.machine_id and host.chip
    assert host.versions["python"] == ".".join(map(str, sys.version_info[:3]))
    assert host.versions["ray"].startswith("2.")
    # torch and mlx are installed in this venv: both engines offer at least the CPU.
    assert "cpu" in host.engines["torch"] and "cpu" in host.engines["mlx"]


def test_cheap_detection_imports_neither_torch_nor_mlx() -> None:
    code = (
        "import sys; from specfleet.workers.hardware import detect_host; detect_host();"
        "print(sorted(m for m in ('torch', 'mlx.core') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_targets_carry_the_backend_default_policy(host: HostInfo) -> None:
    labels = [t.label for t in host.targets()]
    assert "box1/torch/cpu" in labels and "box1/mlx/cpu" in labels
    assert host.default_policies()["box1/torch/cpu"] == "graded"
    cuda = HostInfo(
        "g",
        "m",
        "linux",
        "r",
        "aarch64",
        "Grace",
        "NVIDIA GB10",
        20,
        119.0,
        engines={"mlx": ("cuda", "cpu")},
    )
    assert cuda.default_policies() == {"g/mlx/cuda": "gated", "g/mlx/cpu": "graded"}


def test_host_kind_per_os_and_gpu() -> None:
    assert host_kind("darwin", "arm64", None) == "mac-mlx"
    assert host_kind("linux", "aarch64", "NVIDIA GB10") == "gb10-cuda"
    assert host_kind("linux", "x86_64", "NVIDIA H100 80GB HBM3") == "linux-cuda"
    assert host_kind("linux", "x86_64", None) == "linux-cpu"


def test_fingerprint_ignores_name_and_specfleet_version_only(host: HostInfo) -> None:
    from dataclasses import replace

    renamed = replace(host, name="other", versions={**host.versions, "specfleet": "9.9"})
    assert renamed.fingerprint == host.fingerprint
    newer_torch = replace(host, versions={**host.versions, "torch": "99.0"})
    assert newer_torch.fingerprint != host.fingerprint
    assert host.to_dict()["fingerprint"] == host.fingerprint


def test_load_sample_fields_are_sane() -> None:
    sample = sample_load()
    assert sample.load_1m >= 0 and 0 <= sample.cpu_percent <= 100
    assert len(load_average()) == 3


@pytest.mark.slow
def test_a_busy_neighbour_makes_the_host_not_quiet() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        meter = ForeignCpuMeter()
        meter.update(0.5)
        check = meter.check(threshold_per_core=0.2)
        assert not check.quiet, check
        assert check.foreign_busy_cores > 0.7
        assert "cores busy" in check.reason
        assert not is_quiet(threshold_per_core=0.2, window_s=0.3)
    finally:
        busy.kill()
        busy.wait()
    # The meter's own process burning a core does not count as foreign load: the reading is
    # the host's busy cores less ours (other tests may load the host meanwhile, so the bound is
    # against the host's own count over the same window, not a baseline taken before).
    own = psutil.Process()
    meter = ForeignCpuMeter()
    host_before, own_before = _busy_seconds(), sum(own.cpu_times()[:2])
    started = time.monotonic()
    # Burn until this process has had 0.3 s of CPU (20 s at most): on a box loaded by other
    # tests a fixed 0.5 s of wall time may get it almost none.
    while sum(own.cpu_times()[:2]) - own_before < 0.3 and time.monotonic() - started < 20:
        pass
    foreign_cores = meter.update(0.0)
    window_s = time.monotonic() - started
    host_s, own_s = _busy_seconds() - host_before, sum(own.cpu_times()[:2]) - own_before
    assert own_s > 0.2, "the burn got almost no CPU in 20 s"
    assert foreign_cores < (host_s - own_s) / window_s + 0.15


def _busy_seconds() -> float:
    """CPU seconds all cores have spent busy since boot."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def test_a_worker_never_gives_its_engines_more_threads_than_its_affinity_allows(monkeypatch):
    # Under `taskset -c 0,1` on an 8-core box the worker gave torch 7 threads for 2 CPUs.
    from specfleet.workers import loaded

    monkeypatch.delenv("SPECFLEET_THREADS", raising=False)
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: 16 if logical else 8)
    monkeypatch.setattr(loaded, "logical_cpus", lambda: 2)
    assert loaded.worker_threads() == 1  # one of the two left to Ray's daemons and the driver
    monkeypatch.setattr(loaded, "logical_cpus", lambda: 16)
    assert loaded.worker_threads() == 7  # no mask: one per physical core but one
    monkeypatch.setenv("SPECFLEET_THREADS", "3")
    assert loaded.worker_threads() == 3
