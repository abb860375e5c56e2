"""`specfleet compare` on two ids that differ only in spaces: they were called the same
matrix ("A and B are both 'x'"), which one of them is not; the store names the one it lacks
instead (`parity --baseline` and the web view share the rule, `report.history.same_matrix`)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.report.history import same_matrix
from specfleet.store import open_store
from tests.store.factory import grid, result


def test_ids_differing_in_spaces_are_not_the_same_matrix(tmp_path: Path) -> None:
    assert same_matrix(" base-000001", "base-000001") is None
    assert same_matrix("base-000001", "base-000001") == (
        "A and B are both 'base-000001'; expected two different matrix ids (the baseline, "
        "then the matrix to check against it)")
    url = f"sqlite:///{tmp_path}/s.db"
    with open_store(url) as store:
        runs = grid(repeats=1, prefix="b")
        store.create_matrix("base", {"name": "base"}, runs, matrix_id="base-000001")
        for run in runs:
            store.record_result(result(run))
    said = CliRunner().invoke(app, ["compare", " base-000001", "base-000001", "--db", url])
    assert said.exit_code == 2
    assert said.stderr == (f"error: no matrix ' base-000001' in {url}; expected a whole id "
                           "(did you mean 'base-000001'?)\n")
