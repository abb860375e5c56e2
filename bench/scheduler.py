"""Scheduler overhead per run, and the embedded fleet's start time.

500 toy runs of ~10 ms each over two simulated hosts (a `LocalFleet`: a Ray head plus two
labelled nodes on this machine, each with its worker actor), dispatched by the real
scheduler into a real SQLite store. Per host:

    overhead per run = (host wall - sum of the runs' own total_s) / runs

where host wall runs from the first dispatch to that host's last stored result. It covers
everything around the timed call: mark_running, the machine lease, the actor call, the
worker's preparation and result, the store write. Target: < 20 ms.

The embedded fleet's start time is `fleet.connect()` with no address in a fresh process
(ray.init on loopback + the local worker actor answering its first ping), measured first,
before the simulated fleet exists.

    .venv/bin/python bench/scheduler.py [--runs 500] [--model script:1ms] [--max-tokens 9]
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.cli_args` from a checkout
from bench.cli_args import BenchParser, positive_int, run_main  # noqa: E402

TARGET_MS = 20.0
EMBEDDED_PROBE = """
import os, time
t0 = time.perf_counter()
from specfleet.cluster import fleet
t1 = time.perf_counter()
fleet.connect(num_cpus=2)
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f}")
fleet.disconnect()
"""


def embedded_start_s() -> tuple[float, float]:
    """(import s, connect s) of the embedded fleet, in a fresh process with its own token."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RAY_AUTH_TOKEN_PATH": str(Path(tmp) / "auth_token")}
        out = subprocess.run([sys.executable, "-c", EMBEDDED_PROBE], env=env, check=True,
                             capture_output=True, text=True, timeout=300).stdout
    import_s, connect_s = (float(x) for x in out.split()[-2:])
    return import_s, connect_s


def toy_runs(n: int, model: str, max_tokens: int, hosts: list[str]):
    from specfleet.jobs.plan import run_key
    from specfleet.jobs.run import RunSpec, Target

    return [
        RunSpec(run_key=run_key("bench", i), matrix_id="bench",
                target=Target(host=hosts[i % len(hosts)], engine="toy", device="cpu"),
                model=model, prompt_name=f"p{i % 5}", prompt_text="def f(x):\n    return x\n",
                arm="plain", repeat=i, max_tokens=max_tokens)
        for i in range(n)
    ]


def measure(args, hosts: list[str]) -> dict[str, dict[str, float]]:
    from specfleet.cluster.localfleet import LocalFleet
    from specfleet.cluster.scheduler import SchedulerOptions, run_matrix
    from specfleet.store import open_store

    settled_at: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, LocalFleet(hosts) as local:
        handles = local.start_workers()
        store = open_store(f"sqlite:///{tmp}/bench.db")
        runs = toy_runs(args.runs, args.model, args.max_tokens, hosts)
        store.create_matrix("bench", {"name": "bench"}, runs, matrix_id="bench")

        def on_progress(event) -> None:
            if event.status != "running":
                settled_at[event.host] = time.perf_counter()

        start = time.perf_counter()
        outcome = run_matrix(store, "bench", handles, on_progress,
                             options=SchedulerOptions(progress=False))
        assert outcome.status == "done", outcome
        rows = store.runs(matrix="bench")
        store.close()
    run_s: dict[str, list[float]] = defaultdict(list)
    for row in rows:
        run_s[row.host].append(row.total_s)
    return {
        host: {
            "runs": len(run_s[host]),
            "wall_s": settled_at[host] - start,
            "run_s": sum(run_s[host]),
            "median_run_ms": statistics.median(run_s[host]) * 1e3,
            "overhead_ms": (settled_at[host] - start - sum(run_s[host])) / len(run_s[host]) * 1e3,
        }
        for host in hosts
    }


def main() -> None:
    parser = BenchParser(description="scheduler overhead per run")
    parser.add_argument("--runs", type=positive_int, default=500,
                        help="toy runs in the matrix (default 500)")
    parser.add_argument("--model", default="script:1ms", help="toy model (~10 ms a run)")
    parser.add_argument("--max-tokens", type=positive_int, default=9,
                        help="new tokens per run (default 9)")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} before")
    import_s, connect_s = embedded_start_s()
    print(f"embedded fleet: import {import_s:.2f} s, connect (ray.init + worker ready) "
          f"{connect_s:.2f} s")
    hosts = ["sim1", "sim2"]
    figures = measure(args, hosts)
    print(f"{args.runs} toy runs ({args.model}, plain, {args.max_tokens} tokens) over "
          f"{len(hosts)} simulated hosts; target < {TARGET_MS:g} ms overhead per run")
    print("| host | runs | wall s | sum of runs s | median run ms | overhead ms/run |")
    print("|---|---|---|---|---|---|")
    for host, f in figures.items():
        print(f"| {host} | {f['runs']} | {f['wall_s']:.2f} | {f['run_s']:.2f} | "
              f"{f['median_run_ms']:.1f} | {f['overhead_ms']:.1f} |")
    worst = max(f["overhead_ms"] for f in figures.values())
    print(f"worst host: {worst:.1f} ms per run -> {'PASS' if worst < TARGET_MS else 'FAIL'}; "
          f"load {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    run_main(main)
