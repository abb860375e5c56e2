"""Cut one host's link mid-matrix for each length you name, on a real namespace fleet with
Ray's shipped health checks (or the fast ones), and measure what specfleet does: the figures
of docs/benchmark_results/fleet-faults.md, "Link cuts".

Topology: `tools/netfleet.py`, h1 (head, `fleet up`) and h2 (`fleet join`), default
supervisors. Per cut length: a 40-run toy matrix (`script:100ms`, 12 tokens; h1/toy and
h2/toy x plain, graded x 10 repeats) runs from h1 with `matrix run --wait WAIT`; once h2 runs
its fifth run its link goes down for the length, then up. Measured: how long until h2's run is
`interrupted` (and why), what `fleet status` says during the cut, when Ray declared h2's node
dead (the head's gcs_server.out), when h2 answers again and runs again, how `matrix run` ends,
then `matrix resume --wait 5m` when it did not finish; and at the end every run's status,
how many ran twice (the toy engine's execution log) and how many stored results changed.

    PYTHONPATH=$PWD .venv/bin/python tools/fleet_cuts.py --cuts 5,20,40,80,300 --out cuts.jsonl
    PYTHONPATH=$PWD .venv/bin/python tools/fleet_cuts.py --cuts 20,80 --ray-health fast

`--ray-health fast` sets Ray's 1 s x 3 health checks on the head only (`fleet up`'s
environment), as docs/fleet.md tells users to. Needs root (network namespaces).
"""

from __future__ import annotations

import argparse
import json
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import netfleet  # noqa: E402  (tools/ is not a package)

MATRIX = """\
name: NAME
models: ["script:100ms"]
prompts: [{name: p, text: "one two three four. one two three four. "}]
arms: [plain, graded]
repeats: 10
max_tokens: 12
targets: {engines: [toy]}
"""
RUNS = 40
LIMIT_S = 900  # every wait below is bounded by this
_GCS_DEAD = re.compile(r"^\[(\S+ \S+) .*(Health check failed for node|Node is dead because)")


class Driver:
    """A `specfleet` command in h1's namespace, its stderr lines kept with their times."""

    def __init__(self, fleet, env: dict, *args: str) -> None:
        self.lines: list[tuple[float, str]] = []
        self.proc = fleet.popen("h1", [str(netfleet.BIN / "specfleet"), *args], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stdout: list[str] = []
        self._readers = [threading.Thread(target=self._read, daemon=True),
                         threading.Thread(target=lambda: self.stdout.extend(self.proc.stdout),
                                          daemon=True)]
        for reader in self._readers:
            reader.start()
        self.ended_at = 0.0
        threading.Thread(target=self._ended, daemon=True).start()

    def _ended(self) -> None:
        self.proc.wait()
        self.ended_at = time.monotonic()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append((time.monotonic(), line.rstrip()))

    def wait(self, timeout_s: float, keep: Path | None = None) -> int:
        self.proc.wait(timeout=timeout_s)  # not communicate(): the readers own the pipes
        for reader in self._readers:
            reader.join(timeout=10)
        if keep is not None:
            keep.write_text("".join(f"{at:.1f} {line}\n" for at, line in self.lines))
        return self.proc.returncode

    def first(self, text: str, after: float = 0.0) -> float | None:
        return next((at for at, line in self.lines if text in line and at >= after), None)


def rows(db: Path, matrix_id: str) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        return conn.execute("SELECT run_key, host, status, error, started_at, finished_at "
                            "FROM runs WHERE matrix_id = ?", (matrix_id,)).fetchall()


def matrix_id_of(db: Path, name: str) -> str:
    deadline = time.monotonic() + LIMIT_S
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
                found = conn.execute("SELECT id FROM matrices WHERE name = ?", (name,)).fetchall()
            if found:
                return found[0][0]
        except sqlite3.OperationalError:
            pass  # no store or no schema yet
        time.sleep(0.2)
    raise RuntimeError(f"matrix {name} never appeared")


def until(predicate, limit_s: float, every_s: float = 0.2):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return None


def status_of_h2(fleet) -> dict:
    started = time.monotonic()
    done = fleet.specfleet("h1", "fleet", "status", "--json", timeout=120)
    took_s = round(time.monotonic() - started, 1)
    try:
        row = next(r for r in json.loads(done.stdout) if r["host"] == "h2")
    except (ValueError, StopIteration):
        return {"error": (done.stderr or done.stdout)[-300:], "took_s": took_s}
    return {"health": row["health"], "reason": row.get("reason", ""),
            "node_alive": row["node_alive"], "took_s": took_s}


def gcs_lines(fleet, since_wall: float) -> list[tuple[float, str]]:
    """The head's health-check lines (gcs_server.out) after `since_wall`, with wall times."""
    found = []
    for log in Path(fleet.head.temp_dir).glob("session_*/logs/gcs_server.out"):
        for line in log.read_text(errors="replace").splitlines():
            match = _GCS_DEAD.match(line)
            if match:
                at = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if at >= since_wall:
                    found.append((at, line[:300]))
    return sorted(found)


def one_cut(fleet, db: Path, run_log: Path, cut_s: float, wait: str) -> dict:
    name = f"cut{cut_s:g}-{int(time.time())}"
    matrix = Path(fleet.host("h1").home, f"{name}.yaml")
    matrix.write_text(MATRIX.replace("NAME", name))
    env = fleet.env(fleet.host("h1"), SPECFLEET_DB=f"sqlite:///{db}")
    driver = Driver(fleet, env, "matrix", "run", str(matrix), "--wait", wait)
    matrix_id = matrix_id_of(db, name)
    h2_runs = lambda: [r for r in rows(db, matrix_id) if r[1] == "h2"]  # noqa: E731
    started = until(lambda: sum(r[2] == "done" for r in h2_runs()) >= 4
                    and any(r[2] == "running" for r in h2_runs()), LIMIT_S, 0.05)
    assert started, "h2 never ran its fifth run"
    done_before = {r[0]: r[5] for r in rows(db, matrix_id) if r[2] == "done"}
    cut_at, cut_wall = time.monotonic(), time.time()
    fleet.link("h2", up=False)
    up_at: list[float] = []
    timer = threading.Timer(cut_s, lambda: (fleet.link("h2", up=True),
                                            up_at.extend((time.monotonic(), time.time()))))
    timer.start()
    statuses: list[dict] = []
    checks = [t for t in (12.0, cut_s - 12.0) if 12.0 <= t <= cut_s - 4.0]
    checker = threading.Thread(target=lambda: [
        (time.sleep(max(0.0, cut_at + t - time.monotonic())),
         statuses.append({"at_s": t, **status_of_h2(fleet)})) for t in dict.fromkeys(checks)],
        daemon=True)
    checker.start()
    cut_run = until(lambda: [r for r in h2_runs() if r[2] == "interrupted"]
                    or driver.proc.poll() is not None, cut_s + 60.0, 0.05)
    cut_run = cut_run if isinstance(cut_run, list) else None
    detect_s = round(time.monotonic() - cut_at, 1) if cut_run else None
    timer.join()
    checker.join(timeout=LIMIT_S)
    code = driver.wait(LIMIT_S, Path(fleet.root).parent / f"{name}.stderr")
    until(lambda: driver.ended_at, 10.0, 0.05)
    back = driver.first("h2: back:", after=up_at[0])
    result = {
        "cut_s": cut_s, "wait": wait, "matrix": matrix_id, "cut_at_monotonic": round(cut_at, 1),
        "interrupted_after_s": detect_s, "reason": cut_run[0][3] if cut_run else None,
        "status_during_cut": statuses,
        "gcs": list(dict.fromkeys((round(at - cut_wall, 1), line.split(": ", 1)[-1][:120])
                                  for at, line in gcs_lines(fleet, cut_wall)))[:12],
        "back_after_restore_s": round(back - up_at[0], 1) if back else None,
        "run_exit": code, "run_ended_after_cut_s": round(driver.ended_at - cut_at, 1),
        "run_counts": dict(Counter(r[2] for r in rows(db, matrix_id))),
        "late_results": sum("[late]" in line for _, line in driver.lines),
        "driver_lines": [(round(at - cut_at, 1), line) for at, line in driver.lines
                         if at >= cut_at - 1 and not line.startswith("[") or "h2/" in line
                         and at >= cut_at - 5],
    }
    if code != 0:
        resumed_at = time.monotonic()
        resume = Driver(fleet, env, "matrix", "resume", matrix_id, "--wait", "5m")
        result["resume_exit"] = resume.wait(LIMIT_S, Path(fleet.root).parent
                                            / f"{name}.resume.stderr")
        result["resume_s"] = round(time.monotonic() - resumed_at, 1)
    final = rows(db, matrix_id)
    again = [_wall(r[4]) for r in final if r[1] == "h2" and r[4] and _wall(r[4]) > up_at[1]]
    result["h2_runs_again_after_restore_s"] = round(min(again) - up_at[1], 1) if again else None
    executed = Counter(k for k in run_log.read_text().split() if k in {r[0] for r in final})
    result.update({
        "final_counts": dict(Counter(r[2] for r in final)),
        "ran_twice": sum(n - 1 for n in executed.values() if n > 1),
        "stored_changed": sum(1 for r in final if r[0] in done_before
                              and r[5] != done_before[r[0]]),
    })
    return result


def _wall(stored: str) -> float:
    """A store timestamp (UTC) as a wall-clock time."""
    return datetime.fromisoformat(stored).replace(tzinfo=UTC).timestamp()


def start(fleet, fast_head: bool) -> None:
    """`fleet up` on h1 (with the fast health checks in its environment when asked), the
    token copied to h2, `fleet join` there: what a user does."""
    head = fleet.head
    extra = netfleet.FAST_HEALTH_ENV if fast_head else {}
    fleet.specfleet(head, "fleet", "up", "--name", head.name, "--node-ip", head.ip,
                    "--num-cpus", "1", "--temp-dir", head.temp_dir, "--engines", "torch",
                    env=fleet.env(head, **extra), check=True)
    token = Path(head.home, ".ray", "auth_token")
    for host in fleet.hosts[1:]:
        netfleet.copy_token(token, host)
        netfleet.join(fleet, host)


def wait_healthy(fleet, limit_s: float = LIMIT_S) -> None:
    ok = until(lambda: status_of_h2(fleet).get("health") == "healthy", limit_s, 2.0)
    assert ok, "h2 did not come back"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", default="5,20,40,80,300", help="cut lengths in seconds")
    parser.add_argument("--ray-health", choices=("shipped", "fast"), default="shipped")
    parser.add_argument("--wait", default="2m", help="matrix run's --wait")
    parser.add_argument("--out", help="append one JSON line per cut here")
    args = parser.parse_args()
    why = netfleet.can_build()
    if why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    fleet = netfleet.create({"h1": ["torch"], "h2": ["torch"]}, fast_health=False)
    run_log = Path(fleet.root, "runs.log")
    # Its own machine locks and kept results: other specfleet processes of this user on the
    # box (benchmarks) would otherwise hold the machine lock between our runs.
    fleet.extra_env = {"SPECFLEET_TOY_RUN_LOG": str(run_log),
                       "SPECFLEET_RUNTIME_DIR": str(Path(fleet.root, "rt"))}
    db = Path(fleet.host("h1").home, "cuts.db")
    failed = False
    try:
        started = time.monotonic()
        start(fleet, args.ray_health == "fast")
        print(f"fleet up in {time.monotonic() - started:.0f} s ({args.ray_health} health "
              "checks)", flush=True)
        for cut_s in (float(c) for c in args.cuts.split(",")):
            wait_healthy(fleet)
            result = {"ray_health": args.ray_health, **one_cut(fleet, db, run_log, cut_s,
                                                               args.wait)}
            print(json.dumps(result), flush=True)
            if args.out:
                with open(args.out, "a") as out:
                    out.write(json.dumps(result) + "\n")
            failed |= result["final_counts"] != {"done": RUNS} or result["stored_changed"] > 0
    finally:
        problems = netfleet.destroy(fleet)
        for line in problems:
            print(f"warning: {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
