"""The quiet check's meter restricted to given processes (`ForeignCpuMeter(pids=...)`), and
its GPU rule on fake utilization readings.

The whole-machine meter is tested in test_hardware.py. Here only watched processes count, so
the assertions hold on a machine other developers keep busy.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import psutil
import pytest

from specfleet.workers import quiet
from specfleet.workers.quiet import ForeignCpuMeter

NO_SUCH_PID = 2**22 + 12345


def _spawn(code: str) -> subprocess.Popen:
    """Start `code` once the interpreter is up: its start-up CPU must not land in a window."""
    proc = subprocess.Popen([sys.executable, "-c", f"print('up', flush=True)\n{code}"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "up\n"
    return proc


@pytest.mark.slow
def test_only_watched_processes_count_and_a_killed_one_reads_zero() -> None:
    busy = _spawn("while True: pass")
    idle = _spawn("import time; time.sleep(60)")
    try:
        on_busy, on_idle = ForeignCpuMeter([busy.pid]), ForeignCpuMeter([idle.pid])
        # Even on a crowded 2-core machine a spinning process gets well over 0.05 cores.
        assert on_busy.update(0.6) > 0.05
        assert on_idle.update(0.6) < 0.05  # the busy one is not watched here
        check = on_busy.check(threshold_per_core=0.02)
        assert not check.quiet and check.reason.startswith("other processes keep")
        busy.kill()
        busy.wait(timeout=10)
        on_busy.update(0.3)  # the window in which it died: a gone process is left out
        assert on_busy.update(0.3) == 0.0 and on_busy.check(0.02).quiet
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait(timeout=10)


def test_no_watched_process_alive_is_quiet() -> None:
    meter = ForeignCpuMeter([NO_SUCH_PID])
    assert meter.update(0.0) == 0.0 and meter.check(0.01).quiet


class _OwnCpu:
    """This process's CPU seconds as the meter reads them, set by the test."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self, pid: int | None = None):
        if pid is not None:
            raise psutil.NoSuchProcess(pid)
        return SimpleNamespace(cpu_times=lambda: SimpleNamespace(user=self.seconds, system=0.0))


@pytest.fixture
def own_cpu(monkeypatch) -> _OwnCpu:
    clock = _OwnCpu()
    monkeypatch.setattr(quiet.psutil, "Process", clock)
    return clock


def test_a_busy_gpu_while_the_worker_is_idle_is_not_quiet(own_cpu) -> None:
    meter = ForeignCpuMeter([NO_SUCH_PID], gpu_util=lambda: {0: 4.0, 1: 85.0})
    meter.update(0.05)
    check = meter.check()
    assert not check.quiet and check.gpu_util_percent == 85.0 and check.foreign_busy_cores == 0
    assert check.reason == (f"GPU 1 85% busy while this worker runs no job "
                            f"(limit {quiet.QUIET_GPU_UTIL_PERCENT:.0f}%)")
    calm = ForeignCpuMeter([NO_SUCH_PID], gpu_util=lambda: {0: 4.0}).check()
    assert calm == quiet.QuietCheck(True, 0.0, calm.threshold_cores, "", 4.0)


def test_no_gpu_reading_leaves_the_check_as_it_was(own_cpu) -> None:
    for reader in (None, dict):  # none at all (the default with pids), or nothing readable
        check = ForeignCpuMeter([NO_SUCH_PID], gpu_util=reader).check()
        assert check.quiet and check.reason == "" and check.gpu_util_percent is None


def test_the_gpu_is_not_read_while_this_process_runs_a_job(own_cpu, monkeypatch) -> None:
    reads = []
    meter = ForeignCpuMeter([NO_SUCH_PID], gpu_util=lambda: reads.append(1) or {0: 99.0})
    own_cpu.seconds += 5.0  # our run drives the GPU: its kernels are in the utilization
    meter.update(0.05)
    assert meter.check().quiet and reads == []
    meter.update(0.05)  # idle again, but the driver's sample may still hold our kernels
    assert meter.check().quiet and reads == []
    own_cpu.seconds += 5.0  # busy in the window still open
    monkeypatch.setattr(quiet, "OWN_IDLE_S", 0.0)
    assert meter.check().quiet and reads == []
    meter.update(0.05)
    meter.update(0.05)  # idle for OWN_IDLE_S (0 here): the reading is another job's
    assert not meter.check().quiet and reads == [1]
