"""Pages whose stored names are long unbroken words still fit the screen."""

from __future__ import annotations

import pytest

from specfleet.jobs.run import RunSpec
from specfleet.store import open_store
from tests.serve.test_look_sweep import _serving, overflow
from tests.store.factory import HOST_A, result

PROMPT = "p|q ✓ naïve " + "long" * 10  # one 40-letter word
A, B = "long-000001", "long-000002"


@pytest.fixture(scope="module")
def long_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('long') / 'long.db'}"
    with open_store(url) as store:
        for matrix_id, rate in ((A, 10.0), (B, 9.0)):
            runs = [RunSpec(run_key=f"{matrix_id}-{r}-{arm}", matrix_id=matrix_id,
                            target=HOST_A, model="m1", prompt_name=PROMPT, prompt_text="hi",
                            arm=arm, repeat=r, max_tokens=32, seed=7)
                    for r in range(3) for arm in ("plain", "graded")]
            store.create_matrix("long", {"name": "long"}, runs, matrix_id=matrix_id)
            for run in runs:
                factor = 1.5 if run.arm == "graded" else 1.0
                store.record_result(result(run, rate * factor * (1 + run.repeat / 100)))
            store.finish_matrix(matrix_id, "done")
    return url


@pytest.mark.slow  # a browser, as tests/serve/test_look_sweep.py
@pytest.mark.timeout(120)
def test_a_long_prompt_name_wraps_in_titles_and_compare_cells(long_url):
    # The history page's title ran 123 px past a 600 px window (the page scrolled sideways),
    # and at 1200 px compare's unbreakable prompt cell pushed the verdict column out of view.
    from urllib.parse import quote_plus

    from tests.serve.browser import start_chromium

    history = f"/history?model=m1&prompt={quote_plus(PROMPT)}&arm=graded"
    with _serving(long_url) as base:
        driver = start_chromium(600, 900)
        try:
            driver.get(base + history)
            narrow = overflow(driver)[0]
            driver.set_window_size(1200, 900)
            driver.get(f"{base}/compare?a={A}&b={B}")
            wide = overflow(driver)
        finally:
            driver.quit()
    assert narrow == 0
    assert wide == [0, 0]



@pytest.mark.parametrize(("regressions", "says"),
                         [(0, "0 regressions."), (1, "1 regression."), (2, "2 regressions.")])
def test_compare_counts_one_regression_in_the_singular(regressions, says):
    # The headline read "1 regressions." above the table's own "1 regression in 1 cell".
    from specfleet.report.grid import Grid
    from specfleet.serve.app import _templates

    html = _templates().get_template("compare.html").render(
        table=Grid("t", ("a",), (), ()), rows=[], a=A, b=B, allow_mixed=False,
        coverage="1 of 1 cell compared", complete=True, regressions=regressions)
    assert f"<p>{says} " in html
