"""PostgreSQL stopped for real mid-matrix, for as long as you say (default 3 minutes): the
long-outage proof of docs/benchmark_results/faults.md.

Starts a private PostgreSQL cluster (the test suite's fixture, `tests/conftest.py`) on a
loopback port and a one-host toy fleet (`LocalFleet`), runs `specfleet matrix run` against
the database, stops the server once two runs are done, starts it again after `--outage-s`,
then waits for the driver. With the default retry bound (300 s) the driver rides out a
3-minute stop; with `--retry-s` below the outage it stops with its journal, and the script
runs `matrix resume`, which replays it. Prints the run counts (expected / done /
interrupted / run twice / stored twice) and exits 1 unless every run ended done exactly once.

    PYTHONPATH=$PWD .venv/bin/python tools/pg_outage.py --outage-s 180
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MATRIX = """\
name: outage
models: ["script:40ms"]
prompts:
  - {name: code, text: "def add(a, b):\\n    return a + b\\n"}
arms: [plain]
repeats: 10
max_tokens: 20
targets: {engines: [toy]}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outage-s", type=float, default=180.0)
    parser.add_argument("--retry-s", type=float, default=300.0)
    args = parser.parse_args()
    from tests import conftest
    from tests.cluster.faultcounts import fault_counts
    from tests.cluster.raycluster import start_fleet, wait_until, workers

    work = Path(tempfile.mkdtemp(prefix="specfleet-outage-"))
    run_log = work / "runs.log"
    os.environ["SPECFLEET_TOY_RUN_LOG"] = str(run_log)
    server_cm = conftest.pg_server.__wrapped__()  # the suite's fixture, as a generator
    server = next(server_cm)
    fleet = start_fleet(("solo",))
    try:
        workers(fleet)
        url = server.url(server.create_database())
        from specfleet.store import open_store

        open_store(url).close()  # the schema first: `done()` below only reads
        (work / "m.yaml").write_text(MATRIX)
        env = {**os.environ, "SPECFLEET_JOURNAL_DIR": str(work / "journal"),
               "SPECFLEET_STORE_RETRY_S": str(args.retry_s)}
        cmd = [str(Path(sys.executable).parent / "specfleet"), "matrix", "run",
               str(work / "m.yaml"), "--address", fleet.address, "--db", url, "--no-progress"]
        log = (work / "driver.log").open("w")
        driver = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)

        def done() -> int:
            with open_store(url, read_only=True) as store:
                return sum(m.counts.get("done", 0) for m in store.list_matrices())

        if not wait_until(lambda: done() >= 2, 300, 0.2):
            print("the driver never got going; see", work / "driver.log")
            return 1
        print(f"stopping PostgreSQL for {args.outage_s:g} s")
        server.stop()
        time.sleep(args.outage_s)
        server.start()
        code = driver.wait(timeout=900)
        print(f"driver exit status {code}")
        with open_store(url, read_only=True) as store:
            (matrix,) = store.list_matrices()
        if code != 0:
            time.sleep(65)  # the stopped driver's lease runs out (60 s default)
            resumed = subprocess.run([*cmd[:2], "resume", matrix.id, *cmd[5:]], env=env,
                                     capture_output=True, text=True, timeout=900)
            print("resume:", resumed.returncode, resumed.stderr.strip().splitlines()[:2])
        counts = fault_counts(url, matrix.id, run_log)
        print(counts.line(f"PostgreSQL stopped {args.outage_s:g} s mid-matrix, retry bound "
                          f"{args.retry_s:g} s"))
        print("store lines:", sum("store:" in line for line in
                                  (work / "driver.log").read_text().splitlines()))
        ok = counts.done == counts.expected and counts.run_twice == counts.stored_twice == 0
        return 0 if ok else 1
    finally:
        fleet.shutdown()
        next(server_cm, None)


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    raise SystemExit(main())
