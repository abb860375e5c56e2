"""Fault tests on a real Ray cluster with real drivers (`specfleet matrix run` subprocesses):
a driver SIGKILLed mid-matrix, SIGTERM, a second resume beside a live driver, and a store
outage longer than the driver's retry bound (journal + write-back). PostgreSQL stopped mid-matrix
within the retry bound runs once, across namespace hosts (tests/cluster/test_netfleet_faults.py).

Each prints its run counts (`FAULT COUNTS ...`: expected / done / interrupted / run twice /
stored twice); docs/benchmark_results/faults.md records them.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.resolve import counted
from specfleet.settings import TOY_RUN_LOG
from specfleet.store import open_store
from tests.cluster.faultcounts import fault_counts
from tests.cluster.raycluster import start_fleet, wait_until, workers

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SLOW_TOY = """\
name: faults
models: ["script:15ms"]
prompts:
  - {name: code, text: "def add(a, b):\\n    return a + b\\n"}
arms: [plain]
repeats: REPEATS
max_tokens: 20
targets: {engines: [toy]}
"""
SPECFLEET = str(Path(sys.executable).parent / "specfleet")


@pytest.fixture(scope="module")
def run_log(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("toylog") / "runs.log"


@pytest.fixture(scope="module")
def fleet(run_log):
    os.environ[TOY_RUN_LOG.name] = str(run_log)  # the workers inherit it
    try:
        cluster = start_fleet(("solo",))
        workers(cluster)
    finally:
        os.environ.pop(TOY_RUN_LOG.name)
    yield cluster
    cluster.shutdown()


def matrix_file(tmp_path: Path, repeats: int, model: str = "script:15ms") -> str:
    path = tmp_path / "faults.yaml"
    path.write_text(SLOW_TOY.replace("REPEATS", str(repeats)).replace("script:15ms", model))
    return str(path)


def driver_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "SPECFLEET_JOURNAL_DIR": str(tmp_path / "journal"), **extra}


def start_driver(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as sink:
        return subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def only_matrix(url: str):
    with open_store(url) as store:
        (matrix,) = store.list_matrices()
    return matrix


def done_count(url: str) -> int:
    with open_store(url) as store:
        return sum(m.counts.get("done", 0) for m in store.list_matrices())


def running_count(url: str) -> int:
    with open_store(url) as store:
        return sum(m.counts.get("running", 0) for m in store.list_matrices())


def run_cmd(fleet, path: str, db: str) -> list[str]:
    return [SPECFLEET, "matrix", "run", path, "--address", fleet.address, "--db", db,
            "--no-progress"]


def resume(fleet, matrix_id: str, db: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([SPECFLEET, "matrix", "resume", matrix_id, "--address", fleet.address,
                           "--db", db, "--no-progress"], env=env, capture_output=True,
                          text=True, timeout=180)


def test_killed_driver_reads_interrupted_then_resume_completes(fleet, tmp_path, run_log):
    db = f"sqlite:///{tmp_path / 'kill.db'}"
    env = driver_env(tmp_path, SPECFLEET_LEASE_S="3")
    log = tmp_path / "driver.log"
    driver = start_driver(run_cmd(fleet, matrix_file(tmp_path, 8), db), env, log)
    try:
        assert wait_until(lambda: (tmp_path / "kill.db").exists() and done_count(db) >= 2,
                          90, 0.1), log.read_text()
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=10)
    matrix = only_matrix(db)
    with open_store(db) as store:
        in_flight = {r.run_key for r in store.runs(matrix=matrix.id) if r.status == "running"}
    before = done_count(db)
    assert matrix.status == "running"  # its lease still vouches for it
    assert wait_until(lambda: only_matrix(db).status == "interrupted", 20, 0.2)
    status = CliRunner().invoke(app, ["matrix", "status", matrix.id, "--db", db])
    assert "interrupted" in status.stdout and f"matrix resume {matrix.id}" in status.stdout
    assert wait_until(lambda: _idle(fleet), 30, 0.2)  # the orphaned run ends on the worker
    done = resume(fleet, matrix.id, db, env)
    assert done.returncode == 0, done.stdout + done.stderr
    counts = fault_counts(db, matrix.id, run_log, orphaned=in_flight)
    print(counts.line(f"driver SIGKILL after {before} of 8 runs"))
    assert (counts.expected, counts.done, counts.interrupted) == (8, 8, 0)
    assert (counts.run_twice, counts.stored_twice) == (0, 0)


def test_sigterm_marks_runs_interrupted_and_exits_130(fleet, tmp_path, run_log):
    db = f"sqlite:///{tmp_path / 'term.db'}"
    env = driver_env(tmp_path)
    log = tmp_path / "driver.log"
    driver = start_driver(run_cmd(fleet, matrix_file(tmp_path, 5, "script:40ms"), db), env,
                          log)
    try:
        # A run in flight at the signal: the one whose stored reason this test reads.
        assert wait_until(lambda: (tmp_path / "term.db").exists() and done_count(db) >= 2
                          and running_count(db) >= 1, 90, 0.1), log.read_text()
        driver.send_signal(signal.SIGTERM)
        code = driver.wait(timeout=60)
    finally:
        if driver.poll() is None:
            driver.kill()
    text = log.read_text()
    matrix = only_matrix(db)
    assert code == 130, text
    assert f"resume with: specfleet matrix resume {matrix.id}" in text and "Traceback" not in text
    assert matrix.status == "interrupted" and not matrix.counts.get("running")
    with open_store(db) as store:  # in flight at the SIGTERM, cancelled at its next round
        cut = [r for r in store.runs(matrix=matrix.id) if r.status == "interrupted"]
    in_flight = {r.run_key for r in cut}
    # It read "driver stopped: KeyboardInterrupt" (entry.main's SIGTERM handler raises it).
    assert cut and {r.error for r in cut} == {"driver stopped: interrupted (Ctrl-C or SIGTERM)"}, cut
    assert wait_until(lambda: _idle(fleet), 30, 0.2)
    done = resume(fleet, matrix.id, db, env)  # the driver let go: no lease to wait for
    assert done.returncode == 0, done.stdout + done.stderr
    # A run whose last round came before the cancel finished on its worker with no driver to
    # take its reply (a fresh clone counted it run twice): like a killed driver's, it may run
    # once more on resume.
    counts = fault_counts(db, matrix.id, run_log, orphaned=in_flight)
    print(counts.line("SIGTERM mid-matrix, then resume"))
    assert (counts.expected, counts.done, counts.run_twice, counts.stored_twice) == (5, 5, 0, 0)


def _idle(fleet) -> bool:
    import ray

    from specfleet.workers import actor

    return not ray.get(actor.get_worker("solo").status.remote(), timeout=10)["busy"]


def test_a_second_resume_beside_a_live_driver_takes_nothing(fleet, tmp_path, run_log):
    db = f"sqlite:///{tmp_path / 'two.db'}"
    env = driver_env(tmp_path)
    log = tmp_path / "driver.log"
    # ~1 s runs: 3 s or more left when the second resume is refused (in-process, 0.05 s).
    driver = start_driver(run_cmd(fleet, matrix_file(tmp_path, 5, "script:50ms"), db), env,
                          log)
    try:
        assert wait_until(lambda: (tmp_path / "two.db").exists() and done_count(db) >= 1,
                          90, 0.1), log.read_text()
        matrix_id = only_matrix(db).id
        # In this process: the refusal comes before any fleet is touched.
        second = CliRunner().invoke(app, ["matrix", "resume", matrix_id, "--address",
                                          fleet.address, "--db", db, "--no-progress"])
        assert driver.poll() is None, "the first driver finished before the second resume"
        assert driver.wait(timeout=120) == 0, log.read_text()
    finally:
        if driver.poll() is None:
            driver.kill()
    assert second.exit_code == 1, second.stdout + second.stderr
    assert "still runs it" in second.stderr and "took 0 runs" in second.stderr
    counts = fault_counts(db, matrix_id, run_log)
    print(counts.line("second resume beside a live driver"))
    assert (counts.expected, counts.done, counts.run_twice, counts.stored_twice) == (5, 5, 0, 0)


@pytest.mark.postgres
def test_an_outage_past_the_retry_bound_leaves_a_journal_that_resume_writes_back(
        fleet, tmp_path, run_log, pg_server, pg_url):
    # A lease far longer than the test: the stopped driver's note ends it, or resume waits.
    env = driver_env(tmp_path, SPECFLEET_STORE_RETRY_S="3", SPECFLEET_LEASE_S="600")
    log = tmp_path / "driver.log"
    open_store(pg_url).close()
    # Runs of ~2 s, so the server stops while one is in flight: its result is journaled.
    path = matrix_file(tmp_path, 5, "script:80ms")
    driver = start_driver(run_cmd(fleet, path, pg_url), env, log)
    try:
        assert wait_until(lambda: done_count(pg_url) >= 2 and _running(pg_url), 90, 0.05), \
            log.read_text()
        pg_server.stop()
        try:
            code = driver.wait(timeout=60)
        finally:
            pg_server.start()
    finally:
        if driver.poll() is None:
            driver.kill()
    text = log.read_text()
    assert code == 2 and re.search(r"stayed unreachable for [3-9] s", text), text
    assert "Traceback" not in text
    journaled = list((tmp_path / "journal").rglob("*.json"))
    assert journaled, text
    matrix_id = only_matrix(pg_url).id
    done = resume(fleet, matrix_id, pg_url, env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"journal: {counted(len(journaled), 'finished result')} written" in done.stderr
    assert "ended the leases of 1 driver that stopped on a store outage" in done.stderr
    counts = fault_counts(pg_url, matrix_id, run_log)
    print(counts.line(f"PostgreSQL down past a 3 s retry bound ({len(journaled)} journaled)"))
    assert (counts.expected, counts.done, counts.interrupted) == (5, 5, 0)
    assert (counts.run_twice, counts.stored_twice) == (0, 0)


def _running(url: str) -> bool:
    with open_store(url) as store:
        return bool(store.runs(status="running"))
