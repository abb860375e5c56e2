"""One timed run per machine, whoever asks: the machine lock outside Ray.

Two embedded fleets (two `specfleet matrix run` drivers, each with its own private Ray)
run at once on this machine; the stored start and end times of their runs never overlap.
The lock file is never followed through a link (the runtime directory's own refusals:
tests/test_dirs.py).
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from specfleet.errors import UserError
from specfleet.settings import JOURNAL_DIR, RUNTIME_DIR
from specfleet.store import open_store
from specfleet.workers.hardware import machine_id
from specfleet.workers.machinelock import MachineLock, machine_lock_path
from tests.cluster.raycluster import wait_until

TOY = """\
name: lockNAME
models: ["script:20ms"]
prompts:
  - {name: code, text: "def add(a, b):\\n    return a + b\\n"}
arms: [plain, graded]
repeats: 3
max_tokens: 20
targets: {engines: [toy]}
"""


def test_the_lock_is_never_opened_through_a_link(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(RUNTIME_DIR.name, str(tmp_path / "rt"))
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.symlink(target, machine_lock_path("m1"))
    # O_NOFOLLOW: never through a link; said in one line, not as an OSError traceback.
    with pytest.raises(UserError, match=r"cannot be opened \(Too many levels of symbolic links\)"):
        MachineLock(machine_lock_path("m1")).acquire()
    assert target.read_text() == ""


def test_a_wait_for_the_lock_is_said_once_naming_its_holder(tmp_path, monkeypatch) -> None:
    import threading
    import time

    monkeypatch.setenv(RUNTIME_DIR.name, str(tmp_path / "rt"))
    held = MachineLock(machine_lock_path("m1"), "matrix held-1")
    assert held.acquire()
    said: list[str] = []
    waiter = threading.Thread(target=MachineLock(machine_lock_path("m1")).acquire,
                              kwargs={"on_wait": said.append})
    waiter.start()
    time.sleep(0.6)  # several polls while it is held
    held.release()
    waiter.join(timeout=10)
    assert not waiter.is_alive() and said == [f"matrix held-1, pid {os.getpid()}"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_embedded_fleets_never_overlap_timed_runs(tmp_path) -> None:
    # A short runtime dir, as in production: Ray's sockets live under it.
    runtime = tempfile.mkdtemp(prefix="sf-rt-", dir="/tmp")
    env = {**os.environ, RUNTIME_DIR.name: runtime, JOURNAL_DIR.name: str(tmp_path / "journal")}
    db = f"sqlite:///{tmp_path / 'two.db'}"
    open_store(db).close()
    os.environ[RUNTIME_DIR.name] = env[RUNTIME_DIR.name]
    try:
        # Held by this test (a stray run) until both drivers wait at the machine.
        gate = MachineLock(machine_lock_path(machine_id()))
        assert gate.acquire()
    finally:
        os.environ.pop(RUNTIME_DIR.name)
    drivers = []
    try:
        for name in ("a", "b"):
            path = tmp_path / f"{name}.yaml"
            path.write_text(TOY.replace("NAME", name))
            cmd = [str(Path(sys.executable).parent / "specfleet"), "matrix", "run", str(path),
                   "--db", db, "--no-progress"]
            drivers.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE,
                                            stderr=subprocess.STDOUT, text=True))
        assert wait_until(lambda: _running(db) == 2, 180, 0.2), "both drivers must be waiting"
        gate.release()
        outputs = [d.communicate(timeout=180)[0] for d in drivers]
    finally:
        gate.release()
        for d in drivers:
            if d.poll() is None:
                d.kill()
                d.wait(timeout=30)
        shutil.rmtree(runtime, ignore_errors=True)
    assert [d.returncode for d in drivers] == [0, 0], outputs
    with open_store(db) as store:
        runs = store.runs(status="done")
    spans = sorted((r.started_at, r.finished_at, r.matrix_id) for r in runs)
    overlaps = sum(1 for x, y in itertools.combinations(spans, 2)
                   if x[0] < y[1] and y[0] < x[1])
    print(f"FAULT COUNTS two embedded fleets at once: {len(runs)} runs, {overlaps} overlapping "
          "pairs of timed runs")
    # Both drivers had a run waiting at the machine at once (asserted above), so this is a real
    # contest; which driver wins each turn is up to the scheduler (one may run all of its runs
    # first), so the order is not asserted.
    assert len(runs) == 12 and overlaps == 0


def _running(url: str) -> int:
    with open_store(url) as store:
        return len(store.runs(status="running"))
