"""A number column a hand edit left holding text or a blob (`store.queries._check_numbers`):
every read command, the store's own reads and the web view say the store's one line
("a stored value cannot be read ... restore it from a backup"), naming the column and run.

SQLite only: SQLite keeps whatever type is written to a column, while a PostgreSQL numeric
column refuses text, so such a value cannot be stored there."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store import open_store
from specfleet.store.errors import StoreDamaged
from tests.serve.conftest import client_of
from tests.serve.seed import BASE, NEXT, seed_store

UNREADABLE = "a stored value cannot be read (runs."
FIRST_RUN = f"{BASE}-mac1-m1-edit_fn-0-plain"  # plan order: the first run the check meets


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("seeded") / "s.db"
    seed_store(f"sqlite:///{path}")
    return path


def damaged(seeded: Path, tmp_path: Path, assignment: str) -> Path:
    """A copy of the seeded store with `assignment` (SQL) made on every run of BASE."""
    path = tmp_path / "c.db"
    shutil.copy(seeded, path)
    with sqlite3.connect(path) as db:
        db.execute(f"UPDATE runs SET {assignment} WHERE matrix_id = ?", (BASE,))
    db.close()
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_refused(path: Path, args: list[str], column: str) -> None:
    """`specfleet ARGS --db PATH` exits 2 with one `error:` line naming `column`, no
    traceback, and the store's file as it was, with no side file left beside it."""
    before = digest(path)
    said = CliRunner().invoke(app, [*args, "--db", str(path)])
    lines = said.output.strip().splitlines()
    assert said.exit_code == 2, (said.exit_code, said.output, said.exception)
    assert len(lines) == 1 and lines[0].startswith("error: --db "), said.output
    assert f"{UNREADABLE}{column} of run " in lines[0], lines[0]
    assert "restore it from a backup" in lines[0] and "Traceback" not in said.output
    assert digest(path) == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


@pytest.mark.parametrize("args", [
    ["matrix", "show", BASE],
    ["results", "--cells"],
    ["results", "--matrix", BASE],
    ["history", "--model", "m1", "--prompt", "story", "--arm", "graded"],
    ["compare", BASE, NEXT],
    ["parity", BASE, "--no-replay"],
    ["results", "-o", "json"],
])
def test_text_in_a_rate_is_the_stores_one_line_in_every_read(seeded, tmp_path, args):
    # Each was a traceback: `float('fast')` in stats.runs.to_row, or a format code 'f'
    # given a str in the `results` table.
    assert_refused(damaged(seeded, tmp_path, "tok_per_s = 'fast'"), args, "tok_per_s")


def test_a_report_of_a_damaged_store_writes_no_folder(seeded, tmp_path):
    out = tmp_path / "out" / "report"
    out.parent.mkdir()
    path = damaged(seeded, tmp_path, "tok_per_s = 'fast'")
    before = digest(path)
    said = CliRunner().invoke(app, ["report", BASE, "--out", str(out), "--db", str(path)])
    assert said.exit_code == 2 and said.output.count("\n") == 1, said.output
    assert f"{UNREADABLE}tok_per_s of run " in said.output and "Traceback" not in said.output
    assert not out.exists() and digest(path) == before


@pytest.mark.parametrize(("assignment", "column", "shown"), [
    ("generated_tokens = 'x'", "generated_tokens", "holds str 'x', not a number"),
    ("repeat = 'x'", "repeat", "holds str 'x', not a number"),
    ("temperature = 'hot'", "temperature", "holds str 'hot', not a number"),
    ("total_s = X'00ff'", "total_s", "holds bytes b'\\x00\\xff', not a number"),
])
def test_each_kind_of_number_column_is_checked(seeded, tmp_path, assignment, column, shown):
    # An integer count, the plan's own numbers, a time; a blob made `-o json` a TypeError
    # ("cannot export bytes"). The export reads every column.
    path = damaged(seeded, tmp_path, assignment)
    assert_refused(path, ["results", "-o", "json"], column)
    with open_store(str(path), read_only=True) as store, \
            pytest.raises(StoreDamaged, match="restore it from a backup") as err:
        store.runs(matrix=BASE)
    assert f"runs.{column} of run {FIRST_RUN!r} {shown}" in str(err.value)


def test_the_run_is_named_when_its_key_is_not_read(seeded, tmp_path):
    # A page reads only the columns it shows: the run is looked up once a value is found.
    path = damaged(seeded, tmp_path, "tok_per_s = 'fast'")
    with open_store(str(path), read_only=True) as store:
        assert len(store.runs(matrix=NEXT, columns=("tok_per_s",))) == 12  # undamaged
        with pytest.raises(StoreDamaged, match=f"runs.tok_per_s of run {FIRST_RUN!r} holds"):
            store.runs(matrix=BASE, columns=("model", "tok_per_s"))


def test_a_stored_run_spec_says_the_same(seeded, tmp_path):
    # `matrix resume` rebuilds the RunSpecs of runs not done: pydantic's ValidationError.
    path = damaged(seeded, tmp_path, "temperature = 'hot'")
    with open_store(str(path), read_only=True) as store, \
            pytest.raises(StoreDamaged, match="runs.temperature of run .* holds str 'hot'"):
        store.run_spec(FIRST_RUN)


def test_the_web_view_answers_503(seeded, tmp_path):
    # The matrix's API answered 500 (Internal Server Error).
    path = damaged(seeded, tmp_path, "tok_per_s = 'fast'")
    for web in client_of(f"sqlite:///{path}"):
        for page in (f"/api/matrices/{BASE}", f"/matrices/{BASE}"):
            answer = web.get(page)
            assert answer.status_code == 503, (page, answer.status_code, answer.text[-600:])
            assert f"{UNREADABLE}tok_per_s of run " in answer.text, answer.text[-600:]
