"""The read commands' tables as a demanding user reads them: arms, cells and headlines in the
order the matrix's plan lists them (a failed first repeat moved an arm last; `results
--cells` sorted by name, `plain` after `graded`), and plain, the baseline, showing its spread
where a verdict's `n=2, no verdict` meant nothing. Matrices planned by the real planner (its
rotated arm order), stored in a real SQLite file, read through the real Typer app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.plan import plan_runs
from specfleet.jobs.run import Target
from specfleet.jobs.spec_files import parse_matrix_spec
from specfleet.store import open_store
from tests.report.seed import PROMPTS
from tests.store.factory import result

TARGET = Target(host="h1", engine="toy", device="cpu")
ARMS = ("plain", "graded", "fixed")  # by name: fixed, graded, plain
RATES = {"plain": 100.0, "graded": 150.0, "fixed": 120.0}
OFFSETS = (0.0, -1.0, 1.0)  # a repeat's tok/s beside its arm's rate
FAILED, DONE, TWO, ONE = "failed-000001", "done-000002", "two-000003", "one-000004"


def _store_matrix(store, matrix_id: str, repeats: int, fails=lambda run: False) -> None:
    data = {"name": matrix_id, "models": ["script:1ms"], "arms": list(ARMS),
            "prompts": [{"name": name, "text": text} for name, text in PROMPTS.items()],
            "repeats": repeats, "max_tokens": 8, "targets": {"engines": ["toy"]}}
    spec = parse_matrix_spec(data, matrix_id, Path.cwd())
    runs = plan_runs(spec, [TARGET], matrix_id)
    store.create_matrix(spec.name, spec.model_dump(mode="json"), runs, matrix_id=matrix_id)
    for run in runs:
        if fails(run):
            store.mark_failed(run.run_key, "failed on purpose")
        else:
            store.record_result(result(run, RATES[run.arm] + OFFSETS[run.repeat]))
    store.finish_matrix(matrix_id, "done")


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('plan') / 'specfleet.db'}"
    with open_store(url) as store:
        _store_matrix(store, FAILED, 3, lambda run: run.arm == "graded" and run.repeat == 0)
        _store_matrix(store, DONE, 3)
        _store_matrix(store, TWO, 2)
        _store_matrix(store, ONE, 1)
    return url


def invoke(db: str, *args: str):
    outcome = CliRunner().invoke(app, [*args, "--db", db])
    assert outcome.exit_code == 0, (args, outcome.output)
    return outcome


def _arms_of(lines: list[str]) -> list[str]:
    """The arm column of table rows (`  script:1ms   graded   1.50x ...`)."""
    return [word for line in lines for word in line.split()[1:2]]


def test_a_failed_first_repeat_moves_no_arm(db, tmp_path) -> None:
    # Graded's first repeat failed: it came after fixed in every table, headline and record.
    shown = invoke(db, "matrix", "show", FAILED).stdout
    speedups = shown.split("Prompt lookup over plain")[1].split("\n\n")[1].splitlines()[2:]
    assert _arms_of(speedups) == list(ARMS)
    assert shown.index("Headline graded") < shown.index("Headline fixed")
    body = json.loads(invoke(db, "matrix", "show", FAILED, "-o", "json").stdout)
    assert [(c["prompt"], c["arm"]) for c in body["cells"]] == [
        (prompt, arm) for prompt in PROMPTS for arm in ARMS]
    assert [h["arm"] for h in body["headlines"]] == ["graded", "fixed"]
    pivot = json.loads(invoke(db, "matrix", "show", FAILED, "--pivot", "target",
                              "-o", "json").stdout)
    assert [row["arm"] for row in pivot["rows"]] == ["graded", "fixed"] * 2
    invoke(db, "report", FAILED, "--out", str(tmp_path / "record"))
    record = (tmp_path / "record" / f"{FAILED}.md").read_text(encoding="utf-8")
    table = record.split("### Prompt lookup over plain")[1].split("\n\n")[1].splitlines()[2:]
    assert [row.split(" | ")[1] for row in table] == list(ARMS)


def test_results_cells_follow_the_plan_not_the_alphabet(db) -> None:
    # `results --cells` listed fixed, graded, plain where the tables read plain, graded, fixed.
    for matrix_id in (DONE, FAILED):
        rows = json.loads(invoke(db, "results", "--cells", "--matrix", matrix_id,
                                 "-o", "json").stdout)
        assert [(r["prompt"], r["arm"]) for r in rows] == [
            (prompt, arm) for prompt in PROMPTS for arm in ARMS], matrix_id
        table = invoke(db, "results", "--cells", "--matrix", matrix_id).stdout
        assert [line.split()[3] for line in table.splitlines()
                if line.startswith("  h1/")] == list(ARMS) * 2


def test_plain_under_three_repeats_shows_its_spread(db) -> None:
    # Plain read `1.00x n=2, no verdict`: no verdict applies to the baseline, its spread does.
    two = invoke(db, "matrix", "show", TWO).stdout
    plain_row = next(line for line in two.splitlines() if line.split()[1:2] == ["plain"])
    assert plain_row.split()[2:] == ["1.00x", "±1.0%", "1.00x", "±1.0%"]
    graded_row = next(line for line in two.splitlines() if line.split()[1:2] == ["graded"])
    assert "1.50x n=2, no verdict =" in graded_row  # the arm's verdict needs 3 a side
    plain_tok_s = two.split("Plain decoding")[1].split("\n\n")[1].splitlines()[2]
    assert plain_tok_s.split()[1:] == ["99.5", "±1.0%", "99.5", "±1.0%"]
    one = invoke(db, "matrix", "show", ONE).stdout
    assert next(line for line in one.splitlines()
                if line.split()[1:2] == ["plain"]).split()[2:] == ["1.00x", "n=1"] * 2
    cells = invoke(db, "results", "--cells", "--matrix", ONE).stdout
    # One repeat has no spread, beside its n: not ±0.0%.
    assert [line.split()[5:8] for line in cells.splitlines() if line.startswith("  h1/")][:2] == [
        ["1", "100.00", "–"], ["1", "150.00", "–"]]
