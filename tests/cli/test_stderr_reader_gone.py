"""A driver whose standard error's reader goes away mid-matrix (`2>&1 >out | head -3`) goes
on: before, the broken pipe ended it without a word, exit 1, no tables, its matrix left
`running` under a live lease that refused `matrix resume` for a minute. The real `specfleet
bench` in a subprocess, on the embedded fleet (toy engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specfleet.store import open_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

SPECFLEET = os.path.join(os.path.dirname(sys.executable), "specfleet")


def test_a_matrix_runs_on_when_nobody_reads_its_progress(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    bench = subprocess.Popen(
        [SPECFLEET, "bench", "-e", "toy", "-m", "script:200ms", "-p", "story", "-r", "3", "-n",
         "8", "--embedded", "-o", "json", "--db", url],  # a line a run, ~1.6 s each
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert bench.stderr is not None and bench.stdout is not None
    said = [bench.stderr.readline() for _ in range(3)]  # up to the first run's line
    assert said[2].startswith("[1/6] toy story plain rep 0: "), said
    bench.stderr.close()  # the reader goes away, as `| head -3` does
    out = bench.stdout.read()
    assert bench.wait(timeout=180) == 0
    assert json.loads(out), out  # the tables still came
    with open_store(url, read_only=True) as store:
        (matrix,) = store.list_matrices()
        assert matrix.status == "done"
        assert sorted(r.status for r in store.runs(matrix=matrix.id)) == ["done"] * 6
