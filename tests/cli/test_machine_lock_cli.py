"""Commands that time on this machine outside a fleet (`calibrate`, `generate`) take the
machine lock a fleet's runs take, and say whom they wait for: a table measured beside
another command's timed run misprices every width, and that run is timed beside it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

SPECFLEET = os.path.join(os.path.dirname(sys.executable), "specfleet")
HOLD = """
import sys, time
from specfleet.workers.hardware import machine_id
from specfleet.workers.machinelock import MachineLock, machine_lock_path
lock = MachineLock(machine_lock_path(machine_id()), "matrix held-1")
lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[1]))
"""
WAITED_FOR = "waiting for the machine lock: held by matrix held-1, pid "


@pytest.mark.timeout(300)
@pytest.mark.parametrize("command", [
    ["calibrate", "-m", "smollm2-135m", "--max-width", "2", "--rounds", "1", "--steps", "2",
     "--reps", "1", "--prompt-len", "8", "--no-warm-up"],
    ["generate", "-m", "smollm2-135m", "-p", "Say hi.", "-n", "2", "--no-warm-up"],
], ids=["calibrate", "generate"])
def test_a_command_timing_on_this_machine_waits_for_its_lock_and_says_whom_for(
        tmp_path, command) -> None:
    env = {**os.environ, "SPECFLEET_RUNTIME_DIR": str(tmp_path / "rt"),
           "SPECFLEET_DB": str(tmp_path / "s.db")}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, "90"], env=env,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        timed = subprocess.Popen([SPECFLEET, *command], env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        assert timed.stderr is not None
        said = []
        for line in timed.stderr:  # until it says it waits (or ends without waiting)
            said.append(line)
            if WAITED_FOR in line:
                break
        time.sleep(1.0)
        still_waiting = timed.poll() is None  # it measured nothing while the machine was held
    finally:
        holder.kill()
        holder.wait()
    out, rest = timed.communicate(timeout=240)
    assert timed.returncode == 0, rest[-2000:]
    assert still_waiting
    waits = [line for line in [*said, *rest.splitlines(True)] if WAITED_FOR in line]
    assert waits == [f"specfleet {command[0]}: {WAITED_FOR}{holder.pid}\n"], said
    # ... and when the wait ended: its timing starts then, not when the command started.
    assert re.search(rf"^specfleet {command[0]}: got the machine lock after \d+ s$", rest,
                     re.MULTILINE), rest[-2000:]
