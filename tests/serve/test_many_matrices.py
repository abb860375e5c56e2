"""A store of a season of nightly matrices: every list is paged, its pager is above the list
as well as below it (50 rows of a list fill two screens), and reaches the ends in one click."""

from __future__ import annotations

import re

import pytest

from specfleet.serve.pages import MATRICES_PER_PAGE, RUNS_PER_PAGE
from specfleet.store import open_store
from tests.serve.conftest import client_of
from tests.store.factory import grid

NIGHTS = 2 * MATRICES_PER_PAGE + 20  # three pages, the last one short
WIDE = "nightly-wide"  # one matrix of three pages of runs
WIDE_RUNS = 2 * RUNS_PER_PAGE + 10


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('many') / 'many.db'}"
    with open_store(url) as store:
        for night in range(NIGHTS):
            matrix_id = f"nightly-{night:04d}"
            store.create_matrix("nightly", {"name": "nightly"},
                                grid(arms=("plain",), repeats=1, prefix=matrix_id),
                                matrix_id=matrix_id)
        store.create_matrix("wide", {"name": "wide"},
                            grid(arms=("plain",), repeats=WIDE_RUNS, prefix=WIDE),
                            matrix_id=WIDE)
    yield from client_of(url)


def _pager_links(html: str) -> list[tuple[str, str]]:
    """(label, href) of the first pager on the page."""
    pager = html.split('<p class="pager">')[1].split("</p>")[0]
    return [(label.strip(), href) for href, label in re.findall(r'href="([^"]+)">([^<]+)<', pager)]


def test_the_matrices_list_pages_50_with_its_pager_above_the_list(web):
    html = web.get("/matrices").text
    assert html.count('<tr data-matrix="') == MATRICES_PER_PAGE
    # The pager was only under the 50 rows: the way to older matrices was two screens down.
    assert html.index('<p class="pager">') < html.index('<table class="list" id="matrices">')
    assert _pager_links(html) == [("older →", "/matrices?page=2"),
                                  ("oldest »", "/matrices?page=3")]


def test_the_last_page_of_matrices_holds_the_rest_and_links_back_to_the_newest(web):
    html = web.get("/matrices?page=3").text
    assert html.count('<tr data-matrix="') == NIGHTS + 1 - 2 * MATRICES_PER_PAGE
    assert _pager_links(html) == [("« newest", "/matrices?page=1"),
                                  ("← newer", "/matrices?page=2")]
    listed = web.get("/api/matrices?page=3").json()
    assert (listed["pages"], listed["total"], len(listed["matrices"])) == (3, NIGHTS + 1, 21)


def test_a_runs_pager_names_plan_order_not_time(web):
    # Runs are in plan order: "← newer" and "older →" said the opposite of what page 2 holds.
    html = web.get(f"/matrices/{WIDE}/runs?page=2").text
    base = f"/matrices/{WIDE}/runs"
    assert _pager_links(html) == [("← previous", f"{base}?page=1"),
                                  ("next →", f"{base}?page=3")]
    assert html.index('<p class="pager">') < html.index('<table class="list runs">')
    last = web.get(f"{base}?page=3").text
    assert last.count('<tr class="pending">') == WIDE_RUNS - 2 * RUNS_PER_PAGE
