"""The quiet check's meter restricted to given processes (`ForeignCpuMeter(pids=...)`).

The whole-machine meter is tested in test_hardware.py. Here only watched processes count, so
the assertions hold on a machine other developers keep busy.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from specfleet.workers.quiet import ForeignCpuMeter


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
    meter = ForeignCpuMeter([2**22 + 12345])  # no such pid
    assert meter.update(0.0) == 0.0 and meter.check(0.01).quiet
