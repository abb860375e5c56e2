"""A chaos run on a real namespace fleet: toy matrices run back to back while a seeded random
schedule of faults hits the fleet, overlapping where the schedule says so; then the
invariants of tools/chaos_checks.py are checked from the store, the logs and exit codes.

Topology (tools/netfleet.py): h1 (head, `fleet up`), h2, h3 (`fleet join`), `cli` (only the
token and the address), PostgreSQL in h1's namespace. Drivers run on h1 (no --address) and
on `cli` (--address), with a 10 s run-ownership lease and a 15 s store retry bound.

Faults (the schedule, printed first; the same seed gives the same schedule):
  link_cut      a host's link down for 2-60 s (h2, h3)
  raylet_kill   SIGKILL of a host's raylet (h2, h3; its supervisor rejoins it)
  worker_kill   SIGKILL of a host's worker actor process (any host; Ray restarts it)
  driver_kill   SIGKILL of the running driver (once its matrix has a run in flight, waiting
                up to 30 s); `matrix resume` from the other driver host once its lease ran out
  store_outage  PostgreSQL stopped for 3-30 s, then started
  second_driver `matrix resume` of the running matrix from the other driver host at once
                (once it has a run in flight, as above)
A clock step is not in the schedule: network namespaces share the kernel's wall clock (time
namespaces offset only the monotonic and boot clocks), and no faketime is installed here.

    PYTHONPATH=$PWD .venv/bin/python tools/chaos.py --seed 7 --duration 300
    PYTHONPATH=$PWD .venv/bin/python tools/chaos.py --seed 1,2,3 --json out.jsonl --logs logs
    PYTHONPATH=$PWD .venv/bin/python tools/chaos.py --seed 7 --schedule-only

Several seeds share one fleet, one after another; `--logs` keeps each command's stdout and
stderr, a file each. Exit 1 when an invariant breaks, 2 when the
fleet cannot be built. Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import chaos_checks as checks  # noqa: E402  (tools/ is not a package)
import netfleet  # noqa: E402

FaultKind = Literal["link_cut", "raylet_kill", "worker_kill", "driver_kill", "store_outage",
                    "second_driver"]
WEIGHTS = {"link_cut": 3, "raylet_kill": 1, "worker_kill": 2, "driver_kill": 1,
           "store_outage": 1, "second_driver": 1}
assert set(WEIGHTS) == set(get_args(FaultKind))
GAP_S = (3.0, 15.0)  # between two faults' starts
CUT_S = (2.0, 60.0)
OUTAGE_S = (3.0, 30.0)
LEASE_S = 10  # drivers' run-ownership lease: a killed driver's matrix is free after it
RETRY_S = 15  # drivers' store retry bound: a longer outage ends them with exit 2 (journaled)
SETTLE_S = 600  # the settle after the schedule, bounded
WHOLE_S = 180  # the settle's wait for every host to be back (a supervisor's rejoin), bounded
MID_MATRIX_S = 30  # a driver fault waits this long at most for a run in flight
HOSTS = ("h1", "h2", "h3")
DRIVER_HOSTS = ("h1", "cli")
WRITE_BACK = ("from specfleet.store import open_store; s = open_store(); "
              "print(s.written_back); s.close()")
MATRIX = """\
name: NAME
models: ["script:40ms"]
prompts: [{name: p, text: "one two three four. one two three four. "}]
arms: [plain, graded]
repeats: 2
max_tokens: 12
targets: {engines: [toy]}
"""


@dataclass(frozen=True)
class Fault:
    at_s: float
    kind: FaultKind
    target: str
    length_s: float = 0.0

    def line(self) -> str:
        length = f" for {self.length_s:.1f} s" if self.length_s else ""
        return f"{self.at_s:7.1f} s  {self.kind:<13} {self.target}{length}"


def schedule(seed: int, duration_s: float, hosts: tuple[str, ...] = HOSTS) -> list[Fault]:
    """The seeded fault schedule: a fault every 3-15 s from 8 s on; a host's cuts and the
    store's outages never overlap themselves (every other pair may)."""
    rng = random.Random(seed)
    kinds, weights = list(WEIGHTS), list(WEIGHTS.values())
    faults: list[Fault] = []
    busy: dict[tuple[str, str], float] = {}
    at = 8.0 + rng.uniform(0, 4)
    while at < duration_s:
        kind = rng.choices(kinds, weights)[0]
        workers = hosts[1:] or hosts
        target, length = {
            "link_cut": (rng.choice(workers), round(rng.uniform(*CUT_S), 1)),
            "raylet_kill": (rng.choice(workers), 0.0),
            "worker_kill": (rng.choice(hosts), 0.0),
            "driver_kill": ("driver", 0.0),
            "store_outage": ("store", round(rng.uniform(*OUTAGE_S), 1)),
            "second_driver": ("driver", 0.0),
        }[kind]
        if busy.get((kind, target), 0.0) <= at:
            faults.append(Fault(round(at, 1), kind, target, length))
            busy[(kind, target)] = at + length
        at += rng.uniform(*GAP_S)
    return faults


class Command:
    """A `specfleet` driver command in a host's namespace, its output collected."""

    def __init__(self, fleet, host: str, label: str, args: list[str], env: dict) -> None:
        self.host, self.label, self.killed = host, label, False
        self.matrix_id: str | None = None
        self.started = time.monotonic()
        self.ended: float | None = None
        self.proc = fleet.popen(host, [str(netfleet.BIN / "specfleet"), *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self.out.extend, args=(self.proc.stdout,),
                                          daemon=True),
                         threading.Thread(target=self.err.extend, args=(self.proc.stderr,),
                                          daemon=True)]
        for reader in self._readers:
            reader.start()

    def finish(self) -> None:
        for reader in self._readers:
            reader.join(timeout=10)
        self.ended = time.monotonic()
        said = "".join(self.out) + "".join(self.err)
        for line in said.splitlines():
            if line.startswith("matrix id: "):
                self.matrix_id = line.split()[-1]


class Chaos:
    """One seed's run on a built fleet: the workload, the faults, the record."""

    def __init__(self, fleet, seed: int, duration_s: float, logs: Path | None = None) -> None:
        self.fleet, self.seed, self.duration_s = fleet, seed, duration_s
        self.logs = logs  # each command's stdout and stderr, one file each
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
        self.rng = random.Random(seed * 7919)  # the workload's own choices (hosts)
        self.hosts = tuple(h.name for h in fleet.hosts if h.engines != [])
        self.faults = schedule(seed, duration_s, self.hosts)
        self.t0 = time.monotonic()
        self.stop = threading.Event()
        self.commands: list[Command] = []
        self.ended: list[checks.Ended] = []
        self.matrices: list[str] = []
        self.applied: list[tuple[Fault, str]] = []
        self.outages: list[tuple[float, float]] = []  # store down, monotonic
        self.primary: Command | None = None
        self.history: dict[str, tuple] = {}
        self.lock = threading.Lock()
        self.launched = 0

    # ---- the store ---------------------------------------------------------------------

    def query(self, sql: str, *args) -> list[tuple]:
        return netfleet.sql(self.fleet, sql, *args)

    def try_query(self, sql: str, *args) -> list[tuple] | None:
        try:
            return self.query(sql, *args)
        except Exception:  # noqa: BLE001 - the store may be down on purpose
            return None

    def counts(self, matrix_id: str) -> dict[str, int] | None:
        rows = self.try_query("SELECT status, count(*) FROM runs WHERE matrix_id = %s "
                              "GROUP BY status", matrix_id)
        return None if rows is None else dict(rows)

    def matrix_of(self, cmd: Command) -> str | None:
        if cmd.matrix_id is None and cmd.label.startswith("run "):
            rows = self.try_query("SELECT id FROM matrices WHERE name = %s",
                                  cmd.label.split()[-1])
            cmd.matrix_id = rows[0][0] if rows else None
        return cmd.matrix_id

    # ---- drivers -----------------------------------------------------------------------

    def driver(self, host: str, label: str, *args: str) -> Command:
        env = self.fleet.env(self.fleet.host(host), SPECFLEET_DB=self.fleet.db_url,
                             SPECFLEET_LEASE_S=str(LEASE_S), SPECFLEET_STORE_RETRY_S=str(RETRY_S))
        extra = ["--address", self.fleet.address] if host != "h1" else []
        cmd = Command(self.fleet, host, label, [*args, "--no-progress", "--wait", "90s",
                                                *extra], env)
        with self.lock:
            self.commands.append(cmd)
        return cmd

    def new_matrix(self) -> Command:
        self.launched += 1
        name = f"chaos-{self.seed}-{self.launched}"
        path = Path(self.fleet.root, f"{name}.yaml")
        path.write_text(MATRIX.replace("NAME", name))
        host = DRIVER_HOSTS[self.launched % 2]
        return self.driver(host, f"run {host} {name}", "matrix", "run", str(path))

    def resume(self, matrix_id: str, host: str, role: str = "resume") -> Command:
        cmd = self.driver(host, f"{role} {host} {matrix_id}", "matrix", "resume", matrix_id)
        cmd.matrix_id = matrix_id
        return cmd

    def reap(self) -> None:
        """Record every command that ended: its exit code and its matrix's counts now."""
        with self.lock:
            running = list(self.commands)
        for cmd in running:
            if cmd.ended is None and cmd.proc.poll() is not None:
                cmd.finish()
                matrix_id = self.matrix_of(cmd)
                counts = self.counts(matrix_id) if matrix_id else None
                if matrix_id and matrix_id not in self.matrices:
                    self.matrices.append(matrix_id)
                down = any(a <= cmd.ended and b >= cmd.started for a, b in self.outages)
                self.ended.append(checks.Ended(
                    cmd.label, cmd.proc.returncode, cmd.killed, "".join(cmd.out),
                    "".join(cmd.err), matrix_id, counts,
                    sum(counts.values()) if counts else 0, down or self.store_down()))
                print(f"{self.now():7.1f} s  ended  {cmd.label}: "
                      f"{'killed' if cmd.killed else f'exit {cmd.proc.returncode}'} {counts}",
                      flush=True)
                if self.logs is not None:
                    name = cmd.label.replace(" ", "_") + f"_{cmd.started - self.t0:.0f}s.log"
                    (self.logs / name).write_text("".join(cmd.out) + "---- stderr\n"
                                                  + "".join(cmd.err))

    def store_down(self) -> bool:
        return bool(self.outages) and self.outages[-1][1] == float("inf")

    def workload(self) -> None:
        """Matrices back to back; a matrix its driver left unfinished is resumed (from the
        other driver host when the driver was killed, after its lease)."""
        retries: Counter = Counter()
        while not self.stop.is_set():
            self.reap()
            cmd = self.primary
            if cmd is None or cmd.ended is not None:
                self.primary = self.next_driver(cmd, retries)
            time.sleep(0.3)

    def next_driver(self, last: Command | None, retries: Counter) -> Command | None:
        matrix_id = self.matrix_of(last) if last else None
        counts = self.counts(matrix_id) if matrix_id else {}
        if counts is None or last is not None and time.monotonic() - last.ended < 2.0:
            return last  # the store is down, or the driver just ended: ask again soon
        unfinished = matrix_id and counts.get("done", 0) < sum(counts.values())
        if not unfinished or retries[matrix_id] >= 6:
            return self.new_matrix()
        if last.killed and time.monotonic() < last.ended + LEASE_S + 1:
            return last  # the dead driver's lease still holds its runs
        retries[matrix_id] += 1
        host = [h for h in DRIVER_HOSTS if h != last.host][0] if last.killed \
            else self.rng.choice(DRIVER_HOSTS)
        return self.resume(matrix_id, host)

    # ---- faults ------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.t0

    def apply(self, fault: Fault) -> str:
        fleet = self.fleet
        if fault.kind == "link_cut":
            fleet.link(fault.target, up=False)
            self.stop.wait(fault.length_s)
            fleet.link(fault.target, up=True)
            return "cut, restored"
        if fault.kind == "store_outage":
            self.outages.append((time.monotonic(), float("inf")))
            netfleet.pg_ctl(fleet, "stop")
            self.stop.wait(fault.length_s)
            netfleet.pg_ctl(fleet, "start")
            self.outages[-1] = (self.outages[-1][0], time.monotonic())
            return "stopped, started"
        if fault.kind in ("raylet_kill", "worker_kill"):
            proc = (raylet_of if fault.kind == "raylet_kill" else worker_of)(fleet, fault.target)
            if proc is None:
                return "skipped: no such process now (restarting)"
            with contextlib.suppress(Exception):
                proc.send_signal(signal.SIGKILL)
            return f"killed pid {proc.pid}"
        cmd, matrix_id, waited_s = self.driver_mid_matrix()
        if cmd is None:
            return "skipped: no driver running"
        if fault.kind == "driver_kill":
            cmd.killed = True
            cmd.proc.send_signal(signal.SIGKILL)
            return f"killed {cmd.label} (after {waited_s:.0f} s for a run in flight)"
        if matrix_id is None:
            return "skipped: the matrix is not stored yet"
        other = [h for h in DRIVER_HOSTS if h != cmd.host][0]
        self.resume(matrix_id, other, "second")
        return f"resume from {other} beside {cmd.label}"

    def driver_mid_matrix(self, limit_s: float = MID_MATRIX_S) -> tuple:
        """The running driver once its matrix is stored with a run in flight or done (it
        opens the fleet first: 10-30 s here), waiting at most `limit_s`."""
        started = time.monotonic()
        while True:
            cmd = self.primary
            waited_s = time.monotonic() - started
            if cmd is None or cmd.proc.poll() is not None:
                if waited_s >= limit_s or self.stop.is_set():
                    return None, None, waited_s
            else:
                matrix_id = self.matrix_of(cmd)
                counts = self.counts(matrix_id) if matrix_id else None
                if counts and set(counts) - {"pending"} or waited_s >= limit_s \
                        or self.stop.is_set():
                    return cmd, matrix_id, waited_s
            time.sleep(0.5)

    def faulting(self) -> list[threading.Thread]:
        threads = []
        for fault in self.faults:
            self.stop.wait(max(0.0, fault.at_s - self.now()))
            if self.stop.is_set():
                break

            def one(fault=fault):
                note = self.apply(fault)
                self.applied.append((fault, note))
                print(f"{self.now():7.1f} s  {fault.kind:<13} {fault.target}: {note}",
                      flush=True)

            threads.append(threading.Thread(target=one, daemon=True))
            threads[-1].start()
        return threads

    # ---- the run -----------------------------------------------------------------------

    def run(self) -> list[checks.Check]:
        print(f"chaos seed {self.seed}, {self.duration_s:g} s: {len(self.faults)} faults "
              f"({dict(Counter(f.kind for f in self.faults))})")
        for fault in self.faults:
            print(fault.line())
        self.t0 = time.monotonic()
        worker = threading.Thread(target=self.workload, daemon=True)
        worker.start()
        checkpoints = threading.Thread(target=self.checkpoints, daemon=True)
        checkpoints.start()
        threads = self.faulting()
        self.stop.wait(max(0.0, self.duration_s - self.now()))
        self.stop.set()  # cuts and outages end now
        for thread in threads:
            thread.join(timeout=150)
        worker.join(timeout=30)
        checkpoints.join(timeout=30)
        self.settle()
        return self.check()

    def checkpoints(self) -> None:
        while not self.stop.wait(30):
            with contextlib.suppress(Exception):
                replaced = checks.note_done(self.query, self.matrices, self.history)
                print(f"{self.now():7.1f} s  checkpoint: {len(self.history)} done runs "
                      f"watched, {len(replaced)} replaced", flush=True)

    def settle(self) -> None:
        """Every link up, the store up; the running drivers end; each unfinished matrix is
        resumed once more from h1; each driver host's journal is written back (any
        writing command there does it)."""
        for host in self.hosts[1:]:
            self.fleet.link(host, up=True)
        with contextlib.suppress(Exception):
            netfleet.pg_ctl(self.fleet, "start")
        deadline = time.monotonic() + SETTLE_S
        while time.monotonic() < deadline and any(c.ended is None for c in self.commands):
            self.reap()
            time.sleep(0.5)
        self.find_matrices()
        for matrix_id in list(self.matrices):
            counts = self.counts(matrix_id) or {}
            if counts.get("done", 0) < sum(counts.values()) and time.monotonic() < deadline:
                self.wait_whole(min(deadline, time.monotonic() + WHOLE_S))
                cmd = self.resume(matrix_id, "h1", "settle")
                with contextlib.suppress(subprocess.TimeoutExpired):
                    cmd.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                self.reap()
        for host in DRIVER_HOSTS:  # what every writing command does first
            done = self.fleet.run(host, [sys.executable, "-c", WRITE_BACK], timeout=120,
                                  env=self.fleet.env(self.fleet.host(host),
                                                     SPECFLEET_DB=self.fleet.db_url))
            print(f"settle: {host}'s journal: {(done.stdout or done.stderr).strip()[-300:]}")
        for cmd in self.commands:
            if cmd.ended is None:
                cmd.proc.kill()

    def wait_whole(self, until: float) -> None:
        """Until every host is healthy in `fleet status` (a raylet killed just before the
        settle is still rejoining: a resume started then leaves its host out, as a user's
        would), or `until`."""
        while time.monotonic() < until:
            done = self.fleet.specfleet("h1", "fleet", "status", "--json", timeout=120)
            with contextlib.suppress(json.JSONDecodeError):
                rows = json.loads(done.stdout)
                if len(rows) == len(self.hosts) and all(r["health"] == "healthy" for r in rows):
                    return
            time.sleep(1.0)

    def find_matrices(self) -> None:
        """Every matrix of this seed in the store, also those whose driver ended while the
        store was down (their ids were never read then)."""
        rows = self.try_query("SELECT id FROM matrices WHERE name LIKE %s ORDER BY "
                              "submitted_at", f"chaos-{self.seed}-%")
        for (matrix_id,) in rows or []:
            if matrix_id not in self.matrices:
                self.matrices.append(matrix_id)

    def check(self) -> list[checks.Check]:
        self.find_matrices()
        q, ids = self.query, self.matrices
        for ended in self.ended:  # the store was down when it ended; done runs stay done
            if ended.counts is None and ended.code == 0 and ended.matrix_id:
                ended.counts = self.counts(ended.matrix_id)
                ended.total = sum((ended.counts or {}).values())
        journals = [Path(self.fleet.host(h).home, ".local/share/specfleet/journal")
                    for h in DRIVER_HOSTS]
        return [checks.planned_runs(q, ids), checks.stored_once(q, ids, self.history),
                checks.no_overlap(q, ids),
                checks.nothing_lost(q, ids, Path(self.fleet.root, "runs.log"), journals),
                checks.greedy_identical(q, ids), checks.matrices_final(q, ids),
                checks.exit_codes(self.ended)]

    def summary(self, results: list[checks.Check], wall_s: float) -> dict:
        applied = Counter(f.kind for f, note in self.applied if not note.startswith("skipped"))
        skipped = Counter(f.kind for f, note in self.applied if note.startswith("skipped"))
        return {"seed": self.seed, "duration_s": self.duration_s, "wall_s": round(wall_s),
                "faults_scheduled": len(self.faults), "applied": dict(applied),
                "skipped": dict(skipped), "matrices": len(self.matrices),
                "commands": len(self.ended),
                "checks": {c.name: {"ok": c.ok, **c.counts, "violations": c.violations[:10]}
                           for c in results}}


def raylet_of(fleet, host: str):
    from specfleet.cluster import noderecord

    found = [p for p in noderecord.node_processes(fleet.host(host).temp_dir)
             if p.name() == "raylet"]
    return found[0] if found else None


def worker_of(fleet, host: str):
    import psutil

    done = subprocess.run(["ip", "netns", "pids", fleet.host(host).ns], capture_output=True,
                          text=True, timeout=30)
    for pid in map(int, done.stdout.split()):
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if "WorkerActor" in " ".join(proc.cmdline()[:2]):
                return proc
    return None


def build(num_hosts: int = 3) -> tuple[object, Path]:
    """The namespace fleet (h1..hN + cli), PostgreSQL on h1, the token on cli."""
    from specfleet.settings import RUNTIME_DIR, SELFTEST, TOY_RUN_LOG
    from tests.conftest import _make_root

    hosts = {name: ["torch"] for name in HOSTS[:num_hosts]}
    fleet = netfleet.create(hosts, outside=("cli",), fast_health=False)
    fleet.extra_env = {TOY_RUN_LOG.name: str(Path(fleet.root, "runs.log")),
                       RUNTIME_DIR.name: str(Path(fleet.root, "rt")), SELFTEST.name: "0"}
    pg_root = _make_root()
    try:
        fleet.db_url = netfleet.start_postgres(fleet, pg_root, f"pw-{uuid.uuid4().hex}")
        netfleet.start(fleet)
        netfleet.copy_token(Path(fleet.head.home, ".ray", "auth_token"), fleet.host("cli"))
    except BaseException:
        teardown(fleet, pg_root)
        raise
    return fleet, pg_root


def teardown(fleet, pg_root: Path) -> list[str]:
    problems = netfleet.destroy(fleet)  # PostgreSQL too: it runs in h1's namespace
    shutil.rmtree(pg_root, ignore_errors=True)
    return problems


def run_seeds(fleet, seeds: list[int], duration_s: float, out: Path | None,
              logs: Path | None = None) -> bool:
    """Each seed on the fleet in turn; True when every invariant held for every seed."""
    held = True
    for seed in seeds:
        started = time.monotonic()
        chaos = Chaos(fleet, seed, duration_s, logs / f"seed{seed}" if logs else None)
        results = chaos.run()
        summary = chaos.summary(results, time.monotonic() - started)
        print(f"seed {seed}: applied {summary['applied']} skipped {summary['skipped']}; "
              f"{summary['matrices']} matrices, {summary['commands']} commands")
        for result in results:
            print(result.line())
        held &= all(r.ok for r in results)
        if out is not None:
            with out.open("a") as sink:
                sink.write(json.dumps(summary) + "\n")
    return held


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", default="1", help="a seed, or seeds: 1,2,3")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of faults")
    parser.add_argument("--hosts", type=int, default=3, choices=(2, 3))
    parser.add_argument("--schedule-only", action="store_true", help="print and stop")
    parser.add_argument("--json", type=Path, help="append one JSON line per seed here")
    parser.add_argument("--logs", type=Path, help="keep each command's output under DIR/seedN")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seed.split(",")]
    if args.schedule_only:
        for seed in seeds:
            print(f"seed {seed}:")
            print("\n".join(f.line() for f in schedule(seed, args.duration,
                                                       HOSTS[:args.hosts])))
        return 0
    why = netfleet.can_build()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    started = time.monotonic()
    fleet, pg_root = build(args.hosts)
    print(f"fleet up in {time.monotonic() - started:.0f} s: {fleet.address}", flush=True)
    try:
        held = run_seeds(fleet, seeds, args.duration, args.json, args.logs)
    finally:
        for line in teardown(fleet, pg_root):
            print(f"warning: {line}", file=sys.stderr)
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
