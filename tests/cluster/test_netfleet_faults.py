"""Faults on a real namespace fleet (tools/netfleet.py via tools/chaos.py's `build`): h1 (head)
and h2 in their own network namespaces, `cli` a client with the token, PostgreSQL served from
h1's namespace, toy runs (workers skip their self-test: it is proven in test_netfleet.py).
Ray's health checks are left at their shipped defaults, as `fleet up` gives users.

One fault at a time first, at the network and process level mid-matrix: every phase prints
its exact counts (expected / done / interrupted / doubled) and how long the fault took to be
noticed. Then, on the same fleet, a seeded chaos schedule (tools/chaos.py): toy matrices under
seed 1149's 40 s of faults, overlapping (a driver SIGKILL with `resume` from the other host, a
second driver, h2's link cut, the store stopped longer than the drivers' retry bound, h2's
raylet SIGKILL), after which every invariant of tools/chaos_checks.py must hold.
Skips (with the reason) where namespaces cannot be made: not root, no `ip`.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from specfleet.cluster import noderecord
from tests.cluster.nsfleet import (
    DRIVER_LEASE_S,
    KILLED_DRIVER_LEASE_S,
    drive,
    drive_async,
    load_tool,
    netfleet,
    ok,
    pg_ctl,
    sql,
    write,
)

chaos = load_tool("chaos")
WHY_NOT = netfleet.can_build()
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900),
              pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")]

WAIT_S = 120  # every wait below is bounded by this (and polls at most every 0.2 s)
RECOVER_S = 240  # a supervisor's rejoin: ray start + the worker's imports, on a busy box
HOSTS = 2  # h1 (head) and h2
ARMS = 3
TOY_MATRIX = """\
name: {name}
models: ["script:100ms"]
prompts: [{{name: p, text: "one two three four. one two three four. "}}]
arms: [plain, graded, fixed]
repeats: {repeats}
max_tokens: 12
targets: {{engines: [toy]}}
"""
# The shortest seed (of 1-3000) whose schedule holds all five fault kinds: it ends 54 s in.
SEED, CHAOS_S = 1149, 40.0


@pytest.fixture(scope="module")
def nf():
    fleet, pg_root = chaos.build(HOSTS)
    try:
        yield fleet
    finally:
        problems = chaos.teardown(fleet, pg_root)
        assert not problems, problems


# ---- one fault at a time ----------------------------------------------------------------------


def toy_matrix(nf, name: str, repeats: int) -> tuple[str, int]:
    """A toy matrix file NAME on h1 (12 tokens at 100 ms a run); its path and its run count."""
    path = write(nf, "h1", f"{name}.yaml", TOY_MATRIX.format(name=name, repeats=repeats))
    return path, HOSTS * ARMS * repeats


def counts(nf, matrix_id: str) -> dict[str, int]:
    rows = sql(nf, "SELECT status, count(*) FROM runs WHERE matrix_id = %s GROUP BY status",
               matrix_id)
    return dict(rows)


def finished(nf, matrix_id: str) -> dict[str, object]:
    rows = sql(nf, "SELECT run_key, finished_at FROM runs WHERE matrix_id = %s AND "
                   "status = 'done'", matrix_id)
    return dict(rows)


def newest_matrix(nf, name: str) -> str:
    deadline = time.monotonic() + WAIT_S
    import psycopg

    while time.monotonic() < deadline:
        try:
            rows = sql(nf, "SELECT id FROM matrices WHERE name = %s ORDER BY submitted_at "
                           "DESC LIMIT 1", name)
        except psycopg.errors.UndefinedTable:  # the driver has not created the schema yet
            rows = []
        if rows:
            return rows[0][0]
        time.sleep(0.2)
    raise AssertionError(f"matrix {name} never appeared")


def wait_running_on(nf, matrix_id: str, host: str, wait_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if sql(nf, "SELECT 1 FROM runs WHERE matrix_id = %s AND host = %s AND status = "
                   "'running'", matrix_id, host):
            return
        time.sleep(0.1)
    log = Path(nf.host(host).home, ".cache", "specfleet", "supervisor.log")
    said = log.read_text()[-3000:] if log.exists() else "(no supervisor log)"
    raise AssertionError(f"no run of {matrix_id} ran on {host} within {wait_s:g} s; "
                         f"its supervisor said:\n{said}")


def wait_interrupted_on(nf, matrix_id: str, host: str, since: float) -> float:
    """Seconds from `since` until a run of `host` is `interrupted` in the store."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if sql(nf, "SELECT 1 FROM runs WHERE matrix_id = %s AND host = %s AND status = "
                   "'interrupted'", matrix_id, host):
            return time.monotonic() - since
        time.sleep(0.1)
    raise AssertionError(f"no run of {host} was marked interrupted within {WAIT_S} s")


def wait_lease_out(nf, matrix_id: str) -> None:
    """Until the store's clock is past every heartbeat lease on the matrix and its runs (a
    killed driver renewed them last up to its lease, `DRIVER_LEASE_S` at most, before)."""
    deadline = time.monotonic() + DRIVER_LEASE_S + WAIT_S
    while time.monotonic() < deadline:
        ((held,),) = sql(nf, "SELECT count(*) FROM (SELECT lease_until FROM matrices WHERE id "
                             "= %s UNION ALL SELECT lease_until FROM runs WHERE matrix_id = %s "
                             "AND status = 'running') AS l WHERE lease_until > (now() AT TIME "
                             "ZONE 'UTC')", matrix_id, matrix_id)
        if not held:
            return
        time.sleep(0.2)
    raise AssertionError(f"a lease on {matrix_id} outlived {DRIVER_LEASE_S + WAIT_S} s")


def ran_twice(nf, matrix_id: str) -> int:
    """Executions beyond one per run of the matrix (the toy engine logs each finished one)."""
    keys = {key for (key,) in sql(nf, "SELECT run_key FROM runs WHERE matrix_id = %s",
                                  matrix_id)}
    log = Path(nf.root, "runs.log")
    executed = Counter(k for k in log.read_text().split() if k in keys) if log.exists() else {}
    return sum(n - 1 for n in executed.values() if n > 1)


def report(phase: str, nf, matrix_id: str, expected: int, before: dict, detect_s: float) -> None:
    now = counts(nf, matrix_id)
    after = finished(nf, matrix_id)
    doubled = sum(1 for key, at in before.items() if after.get(key) != at)
    print(f"\n{phase}: expected {expected} / done {now.get('done', 0)} / interrupted "
          f"{now.get('interrupted', 0)} / pending {now.get('pending', 0)} / doubled {doubled}; "
          f"noticed after {detect_s:.1f} s")
    assert doubled == 0, f"{phase}: {doubled} finished runs were run and stored again"


def resume(nf, host: str, matrix_id: str, *args: str) -> subprocess.CompletedProcess:
    return drive(nf, host, "matrix", "resume", matrix_id, "--no-progress", *args, timeout=600)


def raylet_of(nf, host: str) -> psutil.Process:
    temp_dir = nf.host(host).temp_dir
    (raylet,) = [p for p in noderecord.node_processes(temp_dir)
                 if p.name() == "raylet" or "raylet" in " ".join(p.cmdline()[:1])]
    return raylet


def test_a_short_cut_is_noticed_in_seconds_and_matrix_run_finishes_after_it(nf) -> None:
    """h2's link is cut mid-run until the cut is noticed (specfleet's 8 s ping bound). Ray
    (shipped settings: a node is declared dead after about a minute) never notices; specfleet's
    own pings make h2 `unreachable` and its run `interrupted` within seconds, and `fleet
    status` says so. When the link is back, the run's result (finished on h2 meanwhile) is
    asked from its worker and stored once, and `matrix run` itself goes on to the end."""
    # One repeat: h2 is cut in its first run and has two left to run after the cut.
    toy, expected = toy_matrix(nf, "nf-cut", repeats=1)
    driver = drive_async(nf, "h1", "matrix", "run", toy, "--wait", "2m")  # lines, no bars
    matrix_id = newest_matrix(nf, "nf-cut")
    wait_running_on(nf, matrix_id, "h2")
    cut_at = time.monotonic()
    nf.link("h2", up=False)
    try:
        # `fleet status` asks h2 itself (a 2 s connection bound): it runs while the driver's
        # pings notice, so the cut need not outlast both.
        with ThreadPoolExecutor(max_workers=1) as pool:
            asked = pool.submit(nf.specfleet, "h1", "fleet", "status", "--json", timeout=120)
            detect_s = wait_interrupted_on(nf, matrix_id, "h2", cut_at)
            status = asked.result()
        ((reason,),) = sql(nf, "SELECT error FROM runs WHERE matrix_id = %s AND status = "
                               "'interrupted'", matrix_id)
    finally:
        # Back once both have noticed: h2's next run then waits as long again as it was away.
        nf.link("h2", up=True)
        cut_s = time.monotonic() - cut_at
    out, err = driver.communicate(timeout=WAIT_S * 3)
    said = [line for line in err.splitlines() if line.startswith(("h2: ", "[late]"))]
    h2 = next(row for row in json.loads(status.stdout) if row["host"] == "h2")
    print(f"\n{cut_s:.1f} s cut: run interrupted {detect_s:.1f} s after the cut ({reason}); "
          f"fleet status: {h2['health']} ({h2.get('reason')}), node_alive={h2['node_alive']}")
    print("\n".join(said))
    report(f"{cut_s:.1f} s cut, matrix run to the end", nf, matrix_id, expected, {}, detect_s)
    assert reason.startswith("host unreachable for ") and detect_s < 12.0, (reason, detect_s)
    assert h2["health"] == "unreachable" and "is unreachable" in h2["reason"], h2
    assert said[0].startswith("h2: unreachable: no answer to pings for "), said
    assert any(line.startswith("h2: back: answers again after ") for line in said), said
    assert driver.returncode == 0, (out[-2000:], err[-3000:])
    assert counts(nf, matrix_id) == {"done": expected} and ran_twice(nf, matrix_id) == 0


def test_faults_mid_matrix_lose_nothing_and_run_nothing_twice(nf) -> None:
    # Three repeats: h2 keeps runs pending through the cut, the raylet kill and the driver kill.
    toy, expected = toy_matrix(nf, "nf-toy", repeats=3)

    # 1. h2's link is cut while it runs and stays cut past `--wait`: the run is interrupted,
    #    the others finish, `matrix run` gives h2 up and exits 1 with h2's runs pending.
    driver = drive_async(nf, "h1", "matrix", "run", toy, "--no-progress", "--wait", "2s")
    matrix_id = newest_matrix(nf, "nf-toy")
    wait_running_on(nf, matrix_id, "h2")
    cut_at = time.monotonic()
    nf.link("h2", up=False)
    detect_s = wait_interrupted_on(nf, matrix_id, "h2", cut_at)
    out, err = driver.communicate(timeout=WAIT_S * 2)
    assert driver.returncode == 1, (out[-2000:], err[-2000:])
    report("link cut past --wait 2s", nf, matrix_id, expected, {}, detect_s)
    assert counts(nf, matrix_id).get("interrupted", 0) >= 1
    gave_up = [line for line in err.splitlines() if line.startswith("h2: gave up: ")]
    assert len(gave_up) == 1 and "of its runs stay pending" in gave_up[0], err[-2000:]
    assert f"resume with: specfleet matrix resume {matrix_id}" in err + out

    # 2. The link comes back; nobody types anything: h2 answers again (or, if Ray declared
    #    its node dead meanwhile, its supervisor rejoins it) and `resume --wait` runs its
    #    runs. Then h2's raylet is SIGKILLed mid-run: back again. (This driver is killed in 3.)
    nf.link("h2", up=True)
    restored_at = time.monotonic()
    before = finished(nf, matrix_id)
    driver = drive_async(nf, "h1", "matrix", "resume", matrix_id, "--no-progress",
                         "--wait", "5m", lease_s=KILLED_DRIVER_LEASE_S)
    wait_running_on(nf, matrix_id, "h2", RECOVER_S)
    report("link restored", nf, matrix_id, expected, before, time.monotonic() - restored_at)
    before = finished(nf, matrix_id)
    killed_at = time.monotonic()
    raylet_of(nf, "h2").send_signal(signal.SIGKILL)
    detect_s = wait_interrupted_on(nf, matrix_id, "h2", killed_at)
    report("raylet SIGKILL", nf, matrix_id, expected, before, detect_s)
    wait_running_on(nf, matrix_id, "h2", RECOVER_S)
    print(f"raylet SIGKILL: h2 runs again {time.monotonic() - killed_at:.1f} s after the kill")

    # 3. The driver is killed mid-matrix; `matrix resume` from another namespace finishes it.
    before = finished(nf, matrix_id)
    killed_at = time.monotonic()
    driver.send_signal(signal.SIGKILL)
    driver.communicate(timeout=WAIT_S)
    wait_lease_out(nf, matrix_id)  # a dead driver's runs are free once its lease runs out
    done = resume(nf, "cli", matrix_id, "--address", nf.address)
    ok(done)
    report("driver SIGKILL + resume from cli", nf, matrix_id, expected, before,
           time.monotonic() - killed_at)
    final = counts(nf, matrix_id)
    assert final == {"done": expected}, final


# Inside the drivers' store retry bound (300 s by default) and their lease; longer than their
# heartbeat period (a quarter of the lease), so a write fails and is retried in any case.
PG_OUTAGE_S = 4


def test_the_store_stopped_mid_matrix_loses_nothing_across_hosts(nf) -> None:
    # Two repeats: four runs done before the stop, eight during and after it.
    toy, expected = toy_matrix(nf, "nf-pg", repeats=2)
    driver = drive_async(nf, "h1", "matrix", "run", toy, "--no-progress")
    said: list[tuple[float, str]] = []  # (when, line) of the driver's stderr
    reader = threading.Thread(target=lambda: said.extend(
        (time.monotonic(), line) for line in driver.stderr), daemon=True)
    reader.start()
    matrix_id = newest_matrix(nf, "nf-pg")
    deadline = time.monotonic() + WAIT_S
    while counts(nf, matrix_id).get("done", 0) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    before = finished(nf, matrix_id)
    assert len(before) >= 4 and counts(nf, matrix_id).get("pending", 0) > 0, \
        "the matrix ended before the store could be stopped mid-matrix"
    stopped_at = time.monotonic()
    pg_ctl(nf, "stop")
    time.sleep(PG_OUTAGE_S)
    pg_ctl(nf, "start")
    out = driver.stdout.read()
    assert driver.wait(timeout=WAIT_S * 2) == 0, (out[-2000:], said[-20:])
    reader.join(timeout=10)
    retries = [at for at, line in said if "store unreachable" in line]
    assert retries, f"the driver never said it was retrying: {said[-20:]}"
    report(f"PostgreSQL stopped {PG_OUTAGE_S} s", nf, matrix_id, expected, before,
           retries[0] - stopped_at)
    final = counts(nf, matrix_id)
    assert final == {"done": expected}, final
    print(f"PostgreSQL stopped {PG_OUTAGE_S} s: {len(retries)} retry lines, "
          f"{expected - len(before)} runs finished during and after the stop, all stored once")


# ---- a seeded chaos minute, faults overlapping ---------------------------------------------


def test_a_seeded_chaos_schedule_breaks_no_invariant(nf, tmp_path) -> None:
    run = chaos.Chaos(nf, SEED, CHAOS_S, logs=tmp_path)
    results = run.run()
    print()
    for result in results:
        print(result.line())
    for log in sorted(tmp_path.glob("settle_*.log")):
        print(log.name, log.read_text()[-1500:])
    applied = {f.kind for f, note in run.applied if not note.startswith("skipped")}
    assert {"link_cut", "store_outage", "raylet_kill", "driver_kill"} <= applied, run.applied
    assert run.matrices and len(run.ended) >= 3, [e.label for e in run.ended]
    broken = [result.line() for result in results if not result.ok]
    assert not broken, "\n".join(broken)
