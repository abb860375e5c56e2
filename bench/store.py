"""Result-store benchmark: bulk-load synthetic runs, then time the queries users wait on.

Loads `--runs` synthetic runs across `--matrices` matrices (4 targets x 4 of 8 models x 5
prompts x 5 arms x repeats per matrix; the last matrix's runs stay `pending`), then times
what users wait on, end to end through the one statistics path (`specfleet.stats`): the
tables of one matrix (`report.build.build_view`, as `matrix show`), one cell's history across
all matrices (`report.history.cell_history`, one target, as `history`), and a single result
write (`Store.record_result`).
Prints medians and p95 over `--repeats` timings beside the targets (SQLite: table and
history < 100 ms, a write < 5 ms).

Usage:
  .venv/bin/python bench/store.py [--runs 1000000] [--matrices 500] [--db URL] [--keep]
Without --db it uses a fresh SQLite file in a temp dir. PostgreSQL: pass an empty database,
`--db postgresql+psycopg://USER@HOST:PORT/DB` (loaded with COPY).
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from specfleet.jobs.run import RunResult, Target
from specfleet.report.build import build_view
from specfleet.report.history import cell_history
from specfleet.store import Store, open_store
from specfleet.store.tables import Matrix, Prompt, Run
from specfleet.store.values import text_hash

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.cli_args` from a checkout
from bench.cli_args import BenchParser, positive_int, run_main, whole_number  # noqa: E402

TARGETS = [Target(host="mac1", engine="mlx", device="metal"),
           Target(host="mac2", engine="mlx", device="metal"),
           Target(host="spark1", engine="mlx", device="cuda"),
           Target(host="box1", engine="torch", device="cpu")]
MODELS = [f"model-{i}" for i in range(8)]
PROMPTS = {name: f"prompt text of {name} " * 20 for name in
           ("edit_fn", "edit_json", "summary", "write", "story")}
ARMS = ("plain", "auto", "graded", "gated", "fixed")
ARM_GAIN = {"plain": 1.0, "auto": 1.6, "graded": 1.7, "gated": 1.5, "fixed": 1.3}
TARGET_MS = {"speedup_table": 100.0, "cell_history": 100.0, "result_write": 5.0}
CHUNK = 5000


def matrix_runs(m: int, repeats: int, tokens: int, rng: random.Random, t0: datetime,
                done: bool) -> list[dict]:
    """The rows of matrix `m`, all `done` (or all `pending`)."""
    models = [MODELS[(m + k) % len(MODELS)] for k in range(4)]
    rows, order = [], 0
    submitted = t0 + timedelta(hours=m)
    for target in TARGETS:
        for model in models:
            for prompt in PROMPTS:
                for rep in range(repeats):
                    for arm in ARMS:
                        rows.append(_row(m, order, target, model, prompt, arm, rep, tokens,
                                         rng, submitted, done))
                        order += 1
    return rows


def _row(m, order, target, model, prompt, arm, rep, tokens, rng, submitted, done) -> dict:
    row = {
        "run_key": f"m{m}-{order}", "matrix_id": f"bench-{m:04d}", "job_id": None,
        "plan_order": order, "host": target.host, "engine": target.engine,
        "device": target.device, "model": model, "weights_hash": "ab" * 16,
        "prompt_name": prompt, "prompt_hash": text_hash(PROMPTS[prompt]), "chat": True,
        "arm": arm, "resolved_policy": None, "repeat": rep, "max_tokens": 200,
        "temperature": 0.0, "seed": None, "lookup": {"ngram_min": 2, "ngram_max": 3,
                                                     "max_draft": 7, "adaptive": True},
        "loop_guard": None, "status": "pending", "error": None, "result_hash": None,
        "output_text": None, "token_ids": None, "specfleet_version": "0.1.0",
        "created_at": submitted, "started_at": None, "finished_at": None,
        "tok_per_s": None, "noisy": None,
    }
    if done:
        tps = 20.0 * ARM_GAIN[arm] * rng.uniform(0.9, 1.1)
        row.update(status="done", resolved_policy="plain" if arm == "plain" else "graded",
                   output_text="x" * (tokens * 4), token_ids=list(range(tokens)),
                   tok_per_s=tps, noisy=False, result_hash="0" * 64,
                   started_at=submitted, finished_at=submitted + timedelta(seconds=10))
    return row


def bulk_load(store: Store, runs: int, matrices: int, tokens: int) -> float:
    """Insert everything; returns seconds taken."""
    repeats = max(1, runs // (matrices * len(TARGETS) * 4 * len(PROMPTS) * len(ARMS)))
    rng, t0 = random.Random(7), datetime(2025, 1, 1)
    started = time.perf_counter()
    with store.engine.begin() as conn:
        conn.execute(insert(Prompt), [{"text_hash": text_hash(t), "text": t}
                                      for t in PROMPTS.values()])
        conn.execute(insert(Matrix), [
            {"id": f"bench-{m:04d}", "name": f"bench {m}", "spec": {"m": m},
             "spec_hash": "0" * 64, "submitted_at": t0 + timedelta(hours=m),
             "status": "done", "specfleet_version": "0.1.0"} for m in range(matrices)])
    for m in range(matrices):
        rows = matrix_runs(m, repeats, tokens, rng, t0, done=m < matrices - 1)
        _insert_runs(store, rows)
        if m % 50 == 0:
            print(f"  loaded {m + 1}/{matrices} matrices, {time.perf_counter() - started:.0f} s",
                  flush=True)
    _analyze(store)
    return time.perf_counter() - started


def _insert_runs(store: Store, rows: list[dict]) -> None:
    if store.engine.dialect.name == "postgresql":
        _copy_runs(store, rows)
        return
    with store.engine.begin() as conn:
        for i in range(0, len(rows), CHUNK):
            conn.execute(insert(Run), rows[i:i + CHUNK])


def _copy_runs(store: Store, rows: list[dict]) -> None:
    """PostgreSQL's COPY: the fast path for a bulk load."""
    columns = list(rows[0])
    raw = store.engine.raw_connection()
    try:
        with raw.cursor() as cur, cur.copy(f"COPY runs ({', '.join(columns)}) FROM STDIN") as cp:
            for row in rows:
                cp.write_row([json.dumps(row[c]) if isinstance(row[c], dict | list) else row[c]
                              for c in columns])
        raw.commit()
    finally:
        raw.close()


def _analyze(store: Store) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql("ANALYZE")


def timed(fn, repeats: int) -> list[tuple[float, float]]:
    """(wall ms, this process's CPU ms) per call; CPU time shrugs off a busy machine."""
    out = []
    for i in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        fn(i)
        out.append(((time.perf_counter() - wall) * 1e3, (time.process_time() - cpu) * 1e3))
    return out


def measure(store: Store, matrices: int, repeats: int) -> dict[str, list[tuple[float, float]]]:
    """Time the three operations; the first call of each is a warm-up, not counted."""
    rng = random.Random(11)
    done_ids = [f"bench-{m:04d}" for m in range(matrices - 1)]
    pending = [s for s in store.runs_not_done(f"bench-{matrices - 1:04d}")][: repeats + 1]
    cells = [(rng.choice(MODELS), rng.choice(list(PROMPTS)), rng.choice(ARMS[1:]),
              rng.choice(TARGETS).label) for _ in range(repeats + 1)]
    results = {
        "speedup_table": timed(lambda i: build_view(store, done_ids[(i * 37) % len(done_ids)]),
                               repeats + 1)[1:],
        "cell_history": timed(lambda i: cell_history(store, *cells[i]), repeats + 1)[1:],
        "result_write": timed(lambda i: store.record_result(_result(pending[i])),
                              min(repeats + 1, len(pending)))[1:],
    }
    sizes = {"speedup_rows": len(build_view(store, done_ids[0]).cells),
             "history_points": len(cell_history(store, *cells[0]))}
    print(f"  one table: {sizes['speedup_rows']} cells; one history: "
          f"{sizes['history_points']} matrices")
    return results


def _result(spec) -> RunResult:
    return RunResult(run_key=spec.run_key, status="done", target=spec.target, tok_per_s=21.0,
                     output_text="y" * 400, token_ids=list(range(100)), generated_tokens=100)


def report(name: str, samples: list[tuple[float, float]]) -> str:
    ms = sorted(wall for wall, _ in samples)
    med, p95 = statistics.median(ms), ms[min(len(ms) - 1, int(0.95 * len(ms)))]
    cpu = statistics.median(c for _, c in samples)
    verdict = "ok" if med < TARGET_MS[name] else "OVER TARGET"
    return (f"{name:14s} median {med:8.2f} ms  p95 {p95:8.2f} ms  client CPU {cpu:7.2f} ms  "
            f"(n={len(ms)})  target < {TARGET_MS[name]:.0f} ms: {verdict}")


def main() -> None:
    parser = BenchParser(description="result store benchmark")
    parser.add_argument("--runs", type=positive_int, default=1_000_000,
                        help="synthetic runs to load (default 1000000)")
    # One matrix is left pending for the timed writes: a second is needed to read.
    parser.add_argument("--matrices", type=whole_number(2), default=500,
                        help="matrices the runs are spread over (default 500)")
    parser.add_argument("--tokens", type=positive_int, default=50,
                        help="token ids per synthetic run (default 50)")
    parser.add_argument("--repeats", type=positive_int, default=50,
                        help="timed calls of every operation, after one untimed (default 50)")
    parser.add_argument("--db", default=None, help="an EMPTY database (default: temp SQLite)")
    parser.add_argument("--reuse", action="store_true",
                        help="--db already holds a load from an earlier run: only time queries")
    args = parser.parse_args()
    url = args.db or str(Path(tempfile.mkdtemp(prefix="specfleet-bench-")) / "bench.db")
    started = time.perf_counter()
    store = open_store(url)  # creates or upgrades the schema
    print(f"python {platform.python_version()} on {platform.machine()}; {store.display_url}; "
          f"open (schema create/upgrade) {time.perf_counter() - started:.1f} s")
    if not args.reuse:
        load_s = bulk_load(store, args.runs, args.matrices, args.tokens)
        print(f"bulk load: {args.runs} runs in {args.matrices} matrices, {load_s:.1f} s "
              f"({args.runs / load_s:.0f} runs/s)")
    load_before = os.getloadavg()[0]
    for name, ms in measure(store, args.matrices, args.repeats).items():
        print(report(name, ms))
    print(f"load average (1 min) before/after timing: {load_before:.1f} / "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (a shared machine)")
    store.close()


if __name__ == "__main__":
    run_main(main)
