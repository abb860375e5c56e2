"""Stored values that do not read as specfleet writes them (a hand-edited store, another
writer): the matrix and runs pages still answer, the odd value shown as unreadable."""

from __future__ import annotations

import sqlite3

import pytest

from specfleet.serve.pages import UNREADABLE_READING
from tests.serve.conftest import client_of
from tests.serve.seed import BASE, seed_store

# Stored conditions -> what the host's "at the first run" cell says: a field of the wrong
# type, a field missing, a reading that is no object, conditions that are no object.
ODD_CONDITIONS = {
    '{"before": {"at": 0, "platform": "linux", "cpu_max_mhz": "fast"}}': UNREADABLE_READING,
    '{"before": {"platform": "linux"}}': UNREADABLE_READING,
    '{"before": "text"}': UNREADABLE_READING,
    '["a list"]': "–",
}


@pytest.fixture(scope="module", params=list(ODD_CONDITIONS))
def odd_web(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("odd") / "odd.db"
    seed_store(f"sqlite:///{path}")
    db = sqlite3.connect(path)
    with db:  # every run of BASE: the page shows its first one's reading
        db.execute("UPDATE runs SET conditions = ?, load_before = '\"abc\"' "
                   "WHERE matrix_id = ?", (request.param, BASE))
    db.close()
    for web in client_of(f"sqlite:///{path}"):
        yield web, ODD_CONDITIONS[request.param]


def test_an_odd_stored_reading_leaves_the_matrix_page_up(odd_web):
    web, shown = odd_web
    page = web.get(f"/matrices/{BASE}")
    assert page.status_code == 200
    conditions = page.text.split('id="conditions"')[1].split("</table>")[0]
    assert f'<td class="wrap">{shown}</td>' in conditions


def test_a_stored_load_that_is_no_number_shows_a_dash(odd_web):
    web, _ = odd_web
    page = web.get(f"/matrices/{BASE}/runs")
    assert page.status_code == 200
    assert "<td>– → 0.60</td>" in page.text
