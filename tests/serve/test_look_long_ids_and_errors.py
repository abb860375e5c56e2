"""Text no box cut or spilt at 1200 px: the longest matrix ids a store makes under a history
plot's axis, a run's long unbroken error in the runs table, and the lists' progress
counts."""

from __future__ import annotations

import pytest

from specfleet.jobs.run import RunSpec
from specfleet.store import open_store
from tests.serve.test_look_sweep import _serving
from tests.store.factory import HOST_A, result

# As long as `new_matrix_id` makes them: a 24-character slug and six hex digits.
FIRST, SECOND = "prose-sweep-long-prompts-3fa9c2", "prose-sweep-long-prompts-b71e04"
ERROR = ("cannot load /home/someone/.cache/huggingface/hub/models--HuggingFaceTB--SmolLM2-135M"
         "-Instruct/snapshots/12fd25f77366fa6b3b4b768ec3050bf629380bac/model.safetensors\n"
         "second line of the error")


@pytest.fixture(scope="module")
def long_ids_url(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('ids') / 'ids.db'}"
    with open_store(url) as store:
        for matrix_id in (FIRST, SECOND):
            runs = [RunSpec(run_key=f"{matrix_id}-{r}-{arm}", matrix_id=matrix_id,
                            target=HOST_A, model="m1", prompt_name="edit_fn", prompt_text="hi",
                            arm=arm, repeat=r, max_tokens=32)
                    for r in range(4) for arm in ("plain", "graded")]
            store.create_matrix("prose", {"name": "prose"}, runs, matrix_id=matrix_id)
            for run in runs[:-1]:
                store.record_result(result(run, 15.0 if run.arm == "graded" else 10.0))
            store.record_result(result(runs[-1], status="failed").model_copy(
                update={"error": ERROR}))
            store.finish_matrix(matrix_id, "failed")
    return url


# Per page: [axis labels outside their plot's frame, table cells whose text runs past the
# cell, list tables that scroll sideways in their box], once fonts and layout have settled.
SPILLS = """
const done = arguments[arguments.length - 1];
document.fonts.ready.then(() => requestAnimationFrame(() => requestAnimationFrame(() => {
  const outside = (inner, outer) => inner.left < outer.left - 1 || inner.right > outer.right + 1
    || inner.top < outer.top - 1 || inner.bottom > outer.bottom + 1;
  const labels = [...document.querySelectorAll('.plot text.axis')].filter(t =>
    outside(t.getBoundingClientRect(), t.closest('svg').getBoundingClientRect()));
  const cells = [...document.querySelectorAll('table.list td')].filter(td =>
    [td, ...td.querySelectorAll('div, span')].some(e => e.scrollWidth > e.clientWidth + 1));
  const lists = [...document.querySelectorAll('table.list')].filter(t =>
    t.scrollWidth > t.clientWidth + 1);
  done([labels.length, cells.length, lists.length]);
})));"""


@pytest.mark.slow  # a browser, as tests/serve/test_look_sweep.py
@pytest.mark.timeout(120)
def test_long_ids_errors_and_progress_stay_in_their_boxes(long_ids_url):
    # The history plots cut a 31-character matrix id at the frame's foot and left edge; a
    # failed run's unbroken path ran across the tok/s, tokens and stop columns; the matrix
    # list's progress counts pushed its finished and spec columns out of a 1200 px window.
    from tests.serve.browser import start_chromium

    history, runs = "/history?model=m1&prompt=edit_fn&arm=graded", f"/matrices/{SECOND}/runs"
    with _serving(long_ids_url) as base:
        driver = start_chromium(1200, 1000)
        try:
            spills = {}
            for path in (history, runs, "/matrices"):
                driver.get(base + path)
                spills[path] = driver.execute_async_script(SPILLS)
        finally:
            driver.quit()
    # The runs table's twelve columns may scroll in their box; no text may leave its cell.
    assert spills == {history: [0, 0, 0], runs: [0, 0, spills[runs][2]], "/matrices": [0, 0, 0]}
