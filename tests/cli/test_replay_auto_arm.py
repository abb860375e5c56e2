"""`specfleet replay` on one machine's own matrix: the `auto` arm `bench --arms plain,auto`
runs is the policy it resolved to, so replay's row for that policy shows it as measured."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.run import RunSpec, Target
from specfleet.store.store import open_store
from tests.report.test_predictions import run_by_a_worker

TARGET = Target(host="box1", engine="toy", device="cpu")
PROMPT = "def add(a, b):\n    return a + b\n" * 2


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    """A toy matrix of plain and auto (graded on a CPU), greedy, run by a real worker."""
    path = str(tmp_path_factory.mktemp("replay-auto") / "s.db")
    specs = [RunSpec(run_key=f"copy-{arm}-{rep}", target=TARGET, model="script",
                     prompt_name="copy", prompt_text=PROMPT, arm=arm, repeat=rep, max_tokens=40)
             for arm in ("plain", "auto") for rep in (0, 1)]
    return run_by_a_worker(path, "bench", specs, str(tmp_path_factory.mktemp("lock")))


def _rows(stdout: str) -> dict[str, list[str]]:
    return {cells[4].strip(): [c.strip() for c in cells]
            for cells in (line.split("|") for line in stdout.splitlines())
            if len(cells) > 4 and cells[1].strip() == "script"}


def test_an_auto_arm_is_the_measured_speed_up_of_the_policy_it_resolved_to(db, tmp_path):
    with open_store(db) as store:
        matrix_id = store.list_matrices()[0].id
        auto = store.runs(matrix=matrix_id, arm="auto")
        plain = store.runs(matrix=matrix_id, arm="plain")
    assert {r.resolved_policy for r in auto} == {"graded"}
    own = tmp_path / "own.yaml"  # a table of the runs' own host: measured is compared
    own.write_text("host: box1\nratio: [1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8]\n")
    result = CliRunner().invoke(app, ["replay", matrix_id, "--costs", str(own), "--db", db])
    assert result.exit_code == 0, result.output
    rows = _rows(result.stdout)
    # The auto arm's median over plain's: it was "-" (no arm named graded).
    median = sorted(r.tok_per_s for r in auto)
    plain_median = sorted(r.tok_per_s for r in plain)
    expected = (sum(median) / 2) / (sum(plain_median) / 2)
    assert rows["graded"][11] == f"{expected:.3f}x"
    assert rows["graded"][12].endswith("%")
    # Gated and calibrated never ran here: nothing measured.
    assert rows["gated"][11] == "-" and rows["calibrated"][11] == "-"
    assert "2 stored lookup runs replayed, 0 differ" in result.stdout
