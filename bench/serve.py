"""Web-view benchmark: every page of `specfleet serve` over the 1,000,000-run store.

Builds the store with `bench/store.py`'s generator (500 matrices x 2,000 runs; the last
matrix stays pending) once and keeps the file (default: the user cache dir, reused while it
holds the expected number of runs), opens it read-only as `specfleet serve` does, and times
each page through the app (Starlette's TestClient, no network). "Server time" is the app's
own `Server-Timing` header: from the request entering the app to the response starting.
"CPU" is this process's CPU time per request (app and test client; SQLite runs in-process),
the figure a busy shared machine does not inflate. Target: every page under 300 ms server
time (median).

Usage:
  .venv/bin/python bench/serve.py [--db PATH] [--repeats 20] [--rebuild]
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

from sqlalchemy import func, select

from specfleet.dirs import user_cache_dir
from specfleet.serve import create_app
from specfleet.store import open_store
from specfleet.store.readonly import open_read_only
from specfleet.store.tables import Run

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.cli_args` from a checkout
from bench.cli_args import BenchParser, positive_int, run_main  # noqa: E402

RUNS, MATRICES = 1_000_000, 500
TARGET_MS = 300.0
A, B = "bench-0007", "bench-0008"  # two done matrices that share their cells
CELL = "model=model-7&prompt=story&arm=graded"
PAGES = {
    "matrices": "/matrices",
    "matrices, page 5": "/matrices?page=5",
    "matrix (2,000 runs)": f"/matrices/{A}",
    "matrix JSON": f"/api/matrices/{A}",
    "runs, page 3": f"/matrices/{A}/runs?page=3",
    "progress JSON": f"/api/matrices/{A}/progress",
    "history, one target": f"/history?{CELL}&target=box1/torch/cpu",
    "history, 4 targets": f"/history?{CELL}",
    "compare": f"/compare?a={A}&b={B}",
    "spec YAML": f"/matrices/{A}/spec.yaml",
    "fleet (none)": "/fleet",
}


def _bench_store_module():
    """bench/store.py (its generator and bulk load), imported by path."""
    path = Path(__file__).with_name("store.py")
    spec = importlib.util.spec_from_file_location("bench_store", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ensure_store(path: Path, rebuild: bool) -> None:
    """Build the 1,000,000-run store at `path` unless it is already there."""
    if path.exists() and not rebuild:
        with open_read_only(str(path)) as store, store.engine.connect() as conn:
            count = conn.execute(select(func.count()).select_from(Run)).scalar_one()
        if count == RUNS:
            print(f"reusing {path} ({count} runs)")
            return
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_store(str(path)) as store:
        seconds = _bench_store_module().bulk_load(store, RUNS, MATRICES, tokens=50)
    print(f"built {path}: {RUNS} runs in {seconds:.0f} s")


def time_pages(client, repeats: int) -> dict[str, tuple[list[float], list[float], int]]:
    """(server ms, CPU ms, response bytes) per page; the first call of each is a warm-up."""
    out = {}
    for name, path in PAGES.items():
        server, cpu, size = [], [], 0
        for i in range(repeats + 1):
            started = time.process_time()
            response = client.get(path)
            used = (time.process_time() - started) * 1e3
            assert response.status_code == 200, (path, response.text[:300])
            dur = float(re.search(r"dur=([\d.]+)", response.headers["server-timing"]).group(1))
            if i:
                server.append(dur)
                cpu.append(used)
            size = len(response.content)
        out[name] = (server, cpu, size)
    return out


def line(name: str, server: list[float], cpu: list[float], size: int) -> str:
    ms = sorted(server)
    med, p95 = statistics.median(ms), ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    verdict = "ok" if med < TARGET_MS else "OVER TARGET"
    return (f"| {name} | {med:.1f} | {p95:.1f} | {statistics.median(cpu):.1f} | "
            f"{size / 1024:.0f} KiB | {verdict} |")


def main() -> None:
    parser = BenchParser(description="specfleet serve benchmark")
    default = user_cache_dir() / "bench-serve-1m.db"
    parser.add_argument("--db", type=Path, default=default, help="the cached store file")
    parser.add_argument("--repeats", type=positive_int, default=20,
                        help="timed requests per page, after one untimed (default 20)")
    parser.add_argument("--rebuild", action="store_true",
                        help="build the cached store again, even if --db exists")
    args = parser.parse_args()
    from starlette.testclient import TestClient

    ensure_store(args.db, args.rebuild)
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    load_before = os.getloadavg()[0]
    with open_read_only(str(args.db)) as store, TestClient(create_app(store), base_url="http://127.0.0.1:8266") as client:
        results = time_pages(client, args.repeats)
    print(f"| page | server median ms | server p95 ms | CPU median ms | size | "
          f"< {TARGET_MS:.0f} ms |")
    print("|---|---|---|---|---|---|")
    for name, (server, cpu, size) in results.items():
        print(line(name, server, cpu, size))
    print(f"load average (1 min) before/after: {load_before:.1f} / {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    run_main(main)
