"""What reading the host's conditions costs, and proof that it stays out of the timed window.

1. One reading (`sample_conditions`) on this machine's real files, and on a fixture tree with
   two CPUs' cpufreq and two thermal zones (what a bare-metal Linux host adds): median and
   95th-percentile milliseconds over many readings (the first one, which tries to import
   NVML, apart).
2. The same toy runs through one `HostWorker`, arms interleaved: readings on (as shipped)
   against readings replaced by a fixed reading (no I/O). Per arm: median wall ms per
   `run()` call and median tok/s of the timed window; the ratios side by side.

Usage: .venv/bin/python bench/conditions.py [--readings 500] [--runs 60]
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specfleet.jobs.run import RunSpec, Target
from specfleet.workers.conditions import HostConditions, sample_conditions
from specfleet.workers.hardware import detect_host
from specfleet.workers.host import HostWorker

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.cli_args` from a checkout
from bench.cli_args import BenchParser, positive_int, run_main  # noqa: E402

FIXTURE_TREE = Path(__file__).resolve().parent.parent / "tests/workers/conditions/fixtures/sysfs"


def reading_ms(root: str, n: int) -> tuple[float, float, float]:
    """(first reading ms, median ms, p95 ms) of `n` readings under `root`."""
    start = time.perf_counter()
    sample_conditions(root)
    first = (time.perf_counter() - start) * 1000
    times = []
    for _ in range(n):
        start = time.perf_counter()
        sample_conditions(root)
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    return first, statistics.median(times), times[int(0.95 * (len(times) - 1))]


def spec(i: int) -> RunSpec:
    return RunSpec(run_key=f"r{i}", target=Target(host="bench", engine="toy", device="cpu"),
                   model="script", prompt_name="p", prompt_text="def add(a, b): return a + b\n",
                   arm="plain", max_tokens=64)


def interleaved(runs: int) -> dict[str, tuple[float, float]]:
    """Per arm: (median wall ms of run(), median tok/s of the timed window)."""
    with tempfile.TemporaryDirectory() as tmp:
        worker = HostWorker(info=detect_host("bench"), run_lock_path=os.path.join(tmp, "l"),
                            quiet_pids=[])
        shipped = worker._probe.sample
        fixed = HostConditions(at=0.0, platform="linux")
        walls: dict[str, list[float]] = {"readings on": [], "readings off": []}
        rates: dict[str, list[float]] = {"readings on": [], "readings off": []}
        try:
            worker.run(spec(-1))  # warm the path once
            for i in range(runs):
                for arm in (("readings on", "readings off") if i % 2 else
                            ("readings off", "readings on")):
                    worker._probe.sample = shipped if arm == "readings on" else (lambda: fixed)
                    start = time.perf_counter()
                    result = worker.run(spec(i))
                    walls[arm].append((time.perf_counter() - start) * 1000)
                    rates[arm].append(result.tok_per_s)
        finally:
            worker.close()
    return {arm: (statistics.median(walls[arm]), statistics.median(rates[arm])) for arm in walls}


def main() -> None:
    parser = BenchParser(description="cost of host-conditions readings")
    parser.add_argument("--readings", type=positive_int, default=500,
                        help="readings timed back to back (default 500)")
    parser.add_argument("--runs", type=positive_int, default=60,
                        help="rounds of toy runs, readings on and off interleaved (default 60)")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores")
    for label, root in (("this machine (/)", "/"), ("fixture tree (cpufreq x2, zones x2)",
                                                     str(FIXTURE_TREE))):
        first, mid, p95 = reading_ms(root, args.readings)
        print(f"one reading, {label}: first {first:.2f} ms, median {mid:.3f} ms, "
              f"p95 {p95:.3f} ms over {args.readings}")
    arms = interleaved(args.runs)
    on, off = arms["readings on"], arms["readings off"]
    for arm, (wall, rate) in arms.items():
        print(f"{arm:>13}: median run() wall {wall:.2f} ms, median tok/s {rate:.0f}")
    print(f"on / off: wall {on[0] / off[0]:.3f}x (+{on[0] - off[0]:.2f} ms per run), "
          f"timed-window tok/s {on[1] / off[1]:.3f}x")


if __name__ == "__main__":
    run_main(main)
