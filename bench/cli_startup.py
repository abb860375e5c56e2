"""What a `specfleet` command costs before it does its work: the console entry as shipped
(each noun's module imported when one of its commands runs, `cli.main.COMMANDS`) against the
same entry with every noun's module imported first (how every command started before).

Each command runs in a fresh interpreter, the two arms interleaved; the table gives the
median CPU seconds (user + system, from the child's rusage) and wall seconds of each arm and
their ratio. The commands do little else: a version, help pages, `fleet status` against an
address where no head answers (refused at once), and reads of an empty SQLite store.

Usage: .venv/bin/python bench/cli_startup.py [--repeats 7]
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.cli_args` from a checkout
from bench.cli_args import BenchParser, positive_int, run_main  # noqa: E402

COMMANDS = (
    ["--version"],
    ["fleet", "-h"],
    ["fleet", "status", "--address", "127.0.0.1:9"],
    ["models", "list"],
    ["matrix", "list", "--db", "{db}"],
    ["results", "--db", "{db}"],
    ["generate", "-h"],
)
ENTRY = ("import sys\n"
         "{first}"
         "sys.argv = ['specfleet', *sys.argv[1:]]\n"
         "from specfleet.cli.entry import main\n"
         "main()\n")
EVERY_MODULE_FIRST = ("import importlib\n"
                      "from specfleet.cli.main import COMMANDS\n"
                      "for name in dict.fromkeys(COMMANDS.values()):\n"
                      "    importlib.import_module(f'specfleet.cli.{name}')\n")
ARMS = {"as shipped": ENTRY.format(first=""),
        "every module first": ENTRY.format(first=EVERY_MODULE_FIRST)}


def run_once(code: str, args: list[str]) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one command in a fresh interpreter."""
    started = time.perf_counter()
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(child.pid, 0)
    child.returncode = 0  # reaped by wait4
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started


def main() -> None:
    parser = BenchParser(description="CPU and wall seconds of specfleet commands that do "
                         "little, as shipped against every command module imported first")
    parser.add_argument("--repeats", type=positive_int, default=7,
                        help="runs of each command per arm, their median reported (default 7)")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, "
          f"{os.cpu_count()} cpus, {args.repeats} repeats, median\n")
    print("| command | as shipped: CPU s | wall s | every module first: CPU s | wall s "
          "| CPU ratio |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        db = str(Path(tmp, "empty.db"))
        subprocess.run([sys.executable, "-c", ARMS["as shipped"], "db", "upgrade", "--db", db],
                       check=True, capture_output=True)
        for command in COMMANDS:
            argv = [word.replace("{db}", db) for word in command]
            seen: dict[str, list[tuple[float, float]]] = {arm: [] for arm in ARMS}
            for _ in range(args.repeats):
                for arm, code in ARMS.items():
                    seen[arm].append(run_once(code, argv))
            cpu = {arm: statistics.median(c for c, _ in runs) for arm, runs in seen.items()}
            wall = {arm: statistics.median(w for _, w in runs) for arm, runs in seen.items()}
            shipped, eager = "as shipped", "every module first"
            shown = " ".join(command).replace("{db}", "EMPTY.db")
            print(f"| `specfleet {shown}` | {cpu[shipped]:.2f} | {wall[shipped]:.2f} | "
                  f"{cpu[eager]:.2f} | {wall[eager]:.2f} | {cpu[shipped] / cpu[eager]:.2f} |")


if __name__ == "__main__":
    run_main(main)
