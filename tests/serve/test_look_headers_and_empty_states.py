"""What a reader sees where a page has little or odd to show: a refused request in a browser,
a matrix none of whose runs is done, a table of no rows, and columns whose header stands
where their values do."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from specfleet.store import open_store
from tests.serve.conftest import client_of
from tests.serve.seed import BASE, JOB, NEXT
from tests.serve.test_look_sweep import _serving
from tests.store.factory import grid, result

BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
PENDING, FAILED = "pend-000001", "fail-000002"


class Tables(HTMLParser):
    """Each table's header classes and its body rows' cell classes, in column order."""

    def __init__(self, page: str):
        super().__init__()
        self.tables: list[dict] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        classes = dict(attrs).get("class") or ""
        if tag == "table":
            self.tables.append({"headers": [], "rows": []})
        elif tag == "tr" and self.tables:
            self.tables[-1]["rows"].append([])
        elif tag == "th" and self.tables:
            self.tables[-1]["headers"].append(classes.split())
        elif tag == "td" and self.tables and dict(attrs).get("colspan") is None:
            self.tables[-1]["rows"][-1].append(classes.split())


def _side(classes: list[str]) -> str:
    # What app.css does with the classes: a long cell reads from the left.
    return "right" if "right" in classes and "long" not in classes else "left"


def _misaligned(page: str) -> list[tuple[int, int]]:
    """(table, column) whose header and values do not all stand on one side."""
    out = []
    for t, table in enumerate(Tables(page).tables):
        rows = [r for r in table["rows"] if len(r) == len(table["headers"])]
        for column, header in enumerate(table["headers"]):
            if len({_side(header), *(_side(row[column]) for row in rows)}) > 1:
                out.append((t, column))
    return out


@pytest.mark.parametrize("path", [f"/matrices/{BASE}", f"/matrices/{BASE}/runs", f"/jobs/{JOB}",
                                  f"/compare?a={BASE}&b={NEXT}",
                                  "/history?model=m1&prompt=edit_fn&arm=graded"])
def test_a_columns_header_stands_where_its_values_do(client, path):
    # The runs table's rep, tok/s and tokens headers stood left of right-aligned numbers, and
    # compare's "test" header at the right end of a column of left-aligned verdicts.
    assert _misaligned(client.get(path).text) == []


@pytest.mark.parametrize("path", ["/matrices?page=0", f"/compare?a={BASE}&b={BASE}"])
def test_a_refused_request_from_a_browser_is_a_page_with_a_way_back(client, path):
    # The compare form given one id twice answered a bare line of text: no style, no link.
    page = client.get(path, headers={"Accept": BROWSER_ACCEPT})
    assert page.status_code == 400 and page.headers["content-type"].startswith("text/html")
    assert "<title>Bad request · specfleet</title>" in page.text
    assert '<p class="error">' in page.text and '<a id="back" href="/matrices">' in page.text
    assert client.get(path).text.startswith("error: ")  # a script still reads one line


def test_the_compare_forms_inputs_are_labelled(client):
    page = client.get("/matrices").text
    assert '<label>Compare <input name="a"' in page and '<label>with <input name="b"' in page


def test_a_matrix_page_is_titled_as_one(client):
    assert f"<title>Matrix {BASE} · specfleet</title>" in client.get(f"/matrices/{BASE}").text


@pytest.fixture(scope="module")
def undone(tmp_path_factory):
    """A matrix still running with nothing done, and a finished one whose every run failed."""
    url = f"sqlite:///{tmp_path_factory.mktemp('undone') / 'undone.db'}"
    with open_store(url) as store:
        for matrix_id in (PENDING, FAILED):
            runs = grid(repeats=1, prefix=matrix_id)
            name = matrix_id.split("-")[0]
            store.create_matrix(name, {"name": name}, runs, matrix_id=matrix_id)
        for run in grid(repeats=1, prefix=FAILED):
            store.record_result(result(run, status="failed").model_copy(update={"error": "lost"}))
        store.finish_matrix(FAILED, "failed")
    yield from client_of(url)


def test_a_matrix_with_no_done_run_says_why_not_yet(undone):
    # A failed matrix read "No done runs yet." and blamed an old specfleet for its missing
    # host conditions.
    failed = undone.get(f"/matrices/{FAILED}").text
    assert "No run of this matrix finished done (2 failed, 0 interrupted, 0 pending)" in failed
    assert "yet" not in failed and "taken by a specfleet before" not in failed
    assert "No done runs yet." in undone.get(f"/matrices/{PENDING}").text


def test_a_table_of_no_rows_says_none(undone):
    # Compare and parity drew a header row over nothing.
    for path in (f"/compare?a={PENDING}&b={FAILED}", f"/matrices/{FAILED}/parity"):
        assert '<td class="empty" colspan="' in undone.get(path).text, path


@pytest.mark.slow  # a browser, as tests/serve/test_look_sweep.py
@pytest.mark.timeout(120)
def test_a_matrix_id_in_the_list_stays_on_one_line(tmp_path):
    # At 1200 px "demo-925a8d" broke at its hyphen: the progress counts' one-line width
    # claimed the room, though they wrap to two lines anyway.
    from tests.serve.browser import start_chromium

    url = f"sqlite:///{tmp_path / 'list.db'}"
    ids = [f"demo-{n:06x}" for n in (0x3FA9C2, 0x925A8D, 0xB71E04)]
    with open_store(url) as store:
        for matrix_id in ids:
            runs = grid(prefix=matrix_id)
            store.create_matrix("demo", {"name": "demo"}, runs, matrix_id=matrix_id)
            for run in runs:
                store.record_result(result(run))
            store.finish_matrix(matrix_id, "done")
    with _serving(url) as base:
        driver = start_chromium(1200, 900)
        try:
            driver.get(base + "/matrices")
            lines = driver.execute_script(
                "return [...document.querySelectorAll('a.matrix-link')]"
                ".map(a => a.getClientRects().length)")
        finally:
            driver.quit()
    assert lines == [1, 1, 1]
