"""Stored values that do not read as specfleet writes them (a hand-edited store, another
writer): a reading of the wrong fields is shown as unreadable and the page still answers; a
JSON column of the wrong shape (a string where a run's conditions or loads are an object or an
array) is the store's one line, a 503, on the page as on the command line."""

from __future__ import annotations

import sqlite3

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.workers.conditions import UNREADABLE_READING
from tests.serve.conftest import client_of
from tests.serve.seed import BASE, seed_store

# Stored conditions -> what the host's "at the first run" cell says: a field of the wrong
# type, a field missing, a reading that is no object.
ODD_READINGS = {
    '{"before": {"at": 0, "platform": "linux", "cpu_max_mhz": "fast"}}': UNREADABLE_READING,
    '{"before": {"platform": "linux"}}': UNREADABLE_READING,
    '{"before": "text"}': UNREADABLE_READING,
}
UNREADABLE = "a stored value cannot be read (a JSON column holds"


def _odd_store(tmp_path_factory, sql: str, *values) -> str:
    path = tmp_path_factory.mktemp("odd") / "odd.db"
    seed_store(f"sqlite:///{path}")
    db = sqlite3.connect(path)
    with db:  # every run of BASE: the page shows its first one's reading
        db.execute(sql, (*values, BASE))
    db.close()
    return f"sqlite:///{path}"


@pytest.fixture(scope="module", params=list(ODD_READINGS))
def odd_web(request, tmp_path_factory):
    url = _odd_store(tmp_path_factory, "UPDATE runs SET conditions = ? WHERE matrix_id = ?",
                     request.param)
    for web in client_of(url):
        yield web, ODD_READINGS[request.param]


def test_an_odd_stored_reading_leaves_the_matrix_page_up(odd_web):
    web, shown = odd_web
    page = web.get(f"/matrices/{BASE}")
    assert page.status_code == 200
    conditions = page.text.split('id="conditions"')[1].split("</table>")[0]
    assert f'<td class="wrap">{shown}</td>' in conditions


def test_the_record_says_the_same_of_an_odd_reading(tmp_path_factory):
    # The record read it with its own copy of the rule: a traceback where the page answered.
    from specfleet.report.record import record_markdown
    from specfleet.store import open_store

    url = _odd_store(tmp_path_factory, "UPDATE runs SET conditions = ? WHERE matrix_id = ?",
                     next(iter(ODD_READINGS)))
    with open_store(url, read_only=True) as store:
        assert UNREADABLE_READING in record_markdown(store, BASE, [])


@pytest.mark.parametrize(("column", "value", "page"), [
    ("conditions", '["a list"]', f"/matrices/{BASE}"),
    ("load_before", '"abc"', f"/matrices/{BASE}/runs"),
    ("versions", '"abc"', f"/api/matrices/{BASE}/runs"),
])
def test_a_json_column_of_the_wrong_shape_is_the_stores_one_line(
        tmp_path_factory, column, value, page):
    # A list of conditions made the matrix page a 500; a string of versions made `history`
    # a traceback ('str' object has no attribute 'items').
    url = _odd_store(tmp_path_factory, f"UPDATE runs SET {column} = ? WHERE matrix_id = ?",
                     value)
    for web in client_of(url):
        answer = web.get(page)
        assert answer.status_code == 503 and UNREADABLE in answer.text, answer.text[-600:]
    # The export reads every column (a table reads only the ones it shows).
    said = CliRunner().invoke(app, ["results", "--matrix", BASE, "--db", url, "-o", "json"])
    assert said.exit_code == 2 and said.stderr.startswith("error: --db ")
    assert UNREADABLE in said.stderr and said.stderr.count("\n") == 1, said.stderr
