"""The parity page's divergence excerpts ("text there") and its JSON twin against what
`specfleet parity` prints."""

from __future__ import annotations

import json

import pytest

from specfleet.jobs.run import RunSpec
from specfleet.report.parity import check_parity
from specfleet.report.parity_tables import render_parity
from specfleet.store import open_store
from tests.serve.conftest import client_of
from tests.store.factory import HOST_A, result

MATRIX = "diverge-000001"
PLAIN_TEXT = "same start <b>bold</b> then plain's own words"
ARM_TEXT = "same start <b>bold</b> <img src=x onerror=alert(1)> and so on"


@pytest.fixture(scope="module")
def diverging_url(tmp_path_factory) -> str:
    """graded's reply leaves plain's at an HTML-looking tag; calibrated failed."""
    url = f"sqlite:///{tmp_path_factory.mktemp('diverge') / 'diverge.db'}"
    runs = [RunSpec(run_key=f"d-{arm}", matrix_id=MATRIX, target=HOST_A, model="m1",
                    prompt_name="edit_fn", prompt_text="hi", arm=arm, max_tokens=32)
            for arm in ("plain", "graded", "calibrated")]
    with open_store(url) as store:
        store.create_matrix("diverge", {"name": "diverge"}, runs, matrix_id=MATRIX)
        store.record_result(result(runs[0], text=PLAIN_TEXT))
        store.record_result(result(runs[1], text=ARM_TEXT).model_copy(
            update={"token_ids": [5, 9, 9]}))
        store.record_result(result(runs[2], status="failed").model_copy(
            update={"error": "no <b>cost</b> table"}))
        store.finish_matrix(MATRIX, "failed")
    return url


@pytest.fixture(scope="module")
def web(diverging_url):
    yield from client_of(diverging_url)


def test_the_text_there_is_shown_as_text(web):
    page = web.get(f"/matrices/{MATRIX}/parity").text
    assert ("after &#39;same start &lt;b&gt;bold&lt;/b&gt; &#39;: plain &#34;then plain&#39;s"
            "&#34; vs graded &#39;&lt;img src=x o&#39;") in page
    assert "<img src=x" not in page and "<b>bold" not in page and "<b>cost" not in page
    assert "calibrated failed: no &lt;b&gt;cost&lt;/b&gt; table" in page


def test_the_json_twin_carries_the_summary_line_parity_prints(web, diverging_url):
    # The page showed the summary line (and `parity --format json` has it as `summary`);
    # its /api/ twin left it out, so a script read no pairs-compared count in words.
    body = web.get(f"/api/matrices/{MATRIX}/parity").json()
    with open_store(diverging_url) as store:
        printed = json.loads(render_parity(check_parity(store, MATRIX), "json"))
    assert body["summary"] == printed["summary"]
    assert body["summary"].endswith("; 1 of 2 pairs compared")
    assert body == printed
