"""The matrices list filtered by name (`/matrices?name=...`): a part of the name, any case,
paged as the whole list is, the filter kept on every pager link and in the form."""

from __future__ import annotations

import re

import pytest

from specfleet.serve.pages import MATRICES_PER_PAGE
from specfleet.serve.params import MAX_TEXT_CHARS
from specfleet.store import open_store
from tests.serve.conftest import client_of
from tests.store.factory import grid

NIGHTLY = MATRICES_PER_PAGE + 5  # two pages of nightly matrices, the second of 5
NAMES = {"nightly-%04d": ("Nightly-Torch", NIGHTLY), "bench-%04d": ("bench_50%", 2),
         "demo-%04d": ("demo <b>", 1)}


@pytest.fixture(scope="module")
def web(tmp_path_factory):
    url = f"sqlite:///{tmp_path_factory.mktemp('names') / 'names.db'}"
    with open_store(url) as store:
        for pattern, (name, count) in NAMES.items():
            for n in range(count):
                store.create_matrix(name, {"name": name},
                                    grid(arms=("plain",), repeats=1, prefix=pattern % n),
                                    matrix_id=pattern % n)
    yield from client_of(url)


def _names(web, query: str) -> list[str]:
    return [m["name"] for m in web.get(f"/api/matrices?{query}").json()["matrices"]]


def test_a_part_of_the_name_in_any_case_finds_those_matrices(web):
    listed = web.get("/api/matrices?name=TORCH").json()
    assert listed["total"] == NIGHTLY and listed["pages"] == 2 and listed["name"] == "TORCH"
    assert set(_names(web, "name=TORCH")) == {"Nightly-Torch"}
    assert _names(web, "name=ench") == ["bench_50%"] * 2
    page = web.get("/matrices?name=ench").text
    assert page.count('<tr data-matrix="') == 2 and "2 named like “ench”" in page


@pytest.mark.parametrize(("part", "names"), [("50%", {"bench_50%"}), ("_", {"bench_50%"}),
                                             ("%", {"bench_50%"}), ("y-t", {"Nightly-Torch"})])
def test_percent_and_underscore_match_only_themselves(web, part, names):
    # In SQL LIKE they are wildcards: "_" listed every matrix with a name of a character.
    assert set(_names(web, f"name={part.replace('%', '%25')}")) == names


def test_the_filtered_list_pages_and_its_pager_keeps_the_filter(web):
    first = web.get("/matrices?name=night").text
    assert first.count('<tr data-matrix="') == MATRICES_PER_PAGE
    pager = first.split('<p class="pager">')[1].split("</p>")[0]
    assert re.findall(r'href="([^"]+)"', pager) == ["/matrices?page=2&amp;name=night"]
    second = web.get("/matrices?page=2&name=night").text
    assert second.count('<tr data-matrix="nightly-') == NIGHTLY - MATRICES_PER_PAGE
    assert '<a href="/matrices?page=1&amp;name=night">' in second
    past = web.get("/api/matrices?page=3&name=night")
    assert past.status_code == 404 and "expected a page from 1 to 2" in past.json()["error"]


def test_the_form_holds_the_filter_escaped_and_an_emptied_one_lists_all(web):
    page = web.get("/matrices", params={"name": "demo <b>"}).text
    assert 'value="demo &lt;b&gt;"' in page and "<b>" not in page.split("<main>")[1]
    assert '<form class="filter" method="get" action="/matrices"' in page
    assert '<a id="all-matrices" href="/matrices">' in page
    everything = web.get("/api/matrices?name=").json()
    assert everything["total"] == NIGHTLY + 3 and everything["name"] is None


def test_a_name_nothing_holds_says_so(web):
    page = web.get("/matrices?name=zzz")
    assert page.status_code == 200 and "No matrix name holds “zzz” (case ignored)." in page.text
    assert web.get("/api/matrices?name=zzz").json()["total"] == 0


@pytest.mark.parametrize(("query", "says"), [
    ("name=" + "x" * (MAX_TEXT_CHARS + 1), f"expected at most {MAX_TEXT_CHARS} characters"),
    ("name=a%00b", "expected at most"),
    ("name=a&name=b", "query parameter 'name' given twice; expected it once"),
])
def test_a_bad_name_is_a_400_of_one_line(web, query, says):
    api = web.get(f"/api/matrices?{query}")
    assert api.status_code == 400 and says in api.json()["error"]
    page = web.get(f"/matrices?{query}", headers={"Accept": "text/html"})
    assert page.status_code == 400 and says.replace("'", "&#39;") in page.text
    assert '<a id="back" href="/matrices">' in page.text and "Traceback" not in page.text
