"""What a reader sees on the web view's pages: defaults that compare like with like, no
empty columns, numbers printed alike, and pages that fit a narrow screen."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

import pytest

from specfleet.serve import create_app
from specfleet.store import open_store
from specfleet.store.readonly import open_read_only
from tests.serve.conftest import client_of
from tests.serve.seed import BASE
from tests.store.factory import HOST_A, HOST_B, grid, result

FIRST, BENCH, SECOND = "demo-000001", "bench-000002", "demo-000003"
GRADED = {FIRST: (15.0, 15.1, 14.9), BENCH: (15.0, 15.1, 14.9), SECOND: (12.0, 12.1, 11.9)}


@pytest.fixture(scope="module")
def look_url(tmp_path_factory) -> str:
    """Two runs of `demo` with a `bench` between them, as the demo's steps leave a store;
    `story` runs only on HOST_B (as the demo keeps edit_fn to torch), and the second demo's
    graded runs are slower and noisy (compare: "slower; not called a regression, ...")."""
    url = f"sqlite:///{tmp_path_factory.mktemp('look') / 'look.db'}"
    with open_store(url) as store:
        for matrix_id in (FIRST, BENCH, SECOND):
            name = matrix_id.split("-")[0]
            runs = (grid(targets=(HOST_A,), prompts=("edit_fn",), prefix=f"{matrix_id}-a")
                    + grid(targets=(HOST_B,), prompts=("edit_fn", "story"),
                           prefix=f"{matrix_id}-b"))
            store.create_matrix(name, {"name": name, "repeats": 3}, runs, matrix_id=matrix_id)
            for run in runs:
                graded = run.arm == "graded"
                rate = GRADED[matrix_id][run.repeat] if graded else 10.0 + run.repeat / 10
                store.record_result(result(run, rate, noisy=graded and matrix_id == SECOND))
            store.finish_matrix(matrix_id, "done")
    return url


@pytest.fixture(scope="module")
def web(look_url):
    yield from client_of(look_url)


def test_the_compare_form_offers_two_runs_of_one_matrix(web):
    # It offered the two newest: the bench against the second demo, with no cell in common.
    page = web.get("/matrices").text
    assert f'name="a" placeholder="baseline matrix id" required value="{FIRST}"' in page
    assert f'name="b" placeholder="matrix id" required value="{SECOND}"' in page


def test_a_heatmap_has_columns_only_for_the_prompts_its_target_ran(web):
    # The MLX heatmap of the demo drew an `edit_fn` header over an empty column.
    page = web.get(f"/matrices/{FIRST}").text
    heatmaps = page.split('<svg class="heatmap"')[1:]
    columns = {h.split('"', 2)[1]: h.count('<text class="col"') for h in heatmaps}
    assert columns == {"mac1/mlx/metal": 1, "spark1/torch/cuda": 2}


def test_a_runs_load_readings_have_two_decimals_each(client):
    # `round` printed 0.5 beside 0.68 (and 11.0 beside 10.68).
    page = client.get(f"/matrices/{BASE}/runs").text
    assert "<td>0.50 → 0.60</td>" in page


@contextlib.contextmanager
def _serving(url: str):
    import uvicorn

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    store = open_read_only(url)
    server = uvicorn.Server(uvicorn.Config(create_app(store), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        store.close()


# How far the page scrolls sideways, and how many grid tables run past their box's edge.
# Measured once layout has settled (fonts ready, two frames drawn): read straight after the
# load event, a loaded box sometimes caught the page mid-layout, 223 px wider than it ends.
OVERFLOW = """
const done = arguments[arguments.length - 1];
document.fonts.ready.then(() => requestAnimationFrame(() => requestAnimationFrame(() => {
  const root = document.documentElement;
  const cut = [...document.querySelectorAll('.grid table')].filter(t =>
    t.getBoundingClientRect().right > t.closest('.scroll').getBoundingClientRect().right + 1);
  done([root.scrollWidth - root.clientWidth, cut.length]);
})));"""


def overflow(driver) -> list[int]:
    """[px the page scrolls sideways, .grid tables cut at their scroll box's edge]."""
    return driver.execute_async_script(OVERFLOW)


@pytest.mark.slow  # a browser, as tests/serve/test_browser.py (`make test-fast` leaves it out)
@pytest.mark.timeout(120)
def test_pages_fit_a_narrow_screen_and_long_verdicts_wrap(look_url):
    # At 400 px the whole page scrolled sideways (the list tables, the heatmap, the history
    # plots, the header's store URL cut at the edge); at 1280 px compare ran its verdict
    # column ("slower; not called a regression, ...") off the right of its box.
    from tests.serve.browser import start_chromium

    compare = f"/compare?a={FIRST}&b={SECOND}"
    pages = ["/matrices", f"/matrices/{SECOND}", f"/matrices/{SECOND}/runs", compare,
             "/history?model=m1&prompt=story&arm=graded"]
    with _serving(look_url) as base:
        driver = start_chromium(400, 800)
        try:
            narrow = {}
            for path in pages:
                driver.get(base + path)
                narrow[path] = overflow(driver)[0]
            driver.set_window_size(1280, 900)
            driver.get(base + compare)
            wide = overflow(driver)
        finally:
            driver.quit()
    assert narrow == dict.fromkeys(pages, 0)
    assert wide == [0, 0]


def _history_rows(speedups: list[float], changed_at: int):
    from types import SimpleNamespace

    interval = SimpleNamespace(low=0.7, high=0.9, coverage=0.9)
    return [SimpleNamespace(
        target="vm/torch/cpu", matrix_id=f"m-{i}", submitted_at="2026-12-06 16:44",
        values=(13.0 + i, 13.5 + i, 14.0 + i), median_tok_per_s=13.5 + i, speedup=s, differs=(),
        change=SimpleNamespace(changed=i == changed_at, ratio=0.8, interval=interval,
                               n_before=3, n_after=3) if i else None)
        for i, s in enumerate(speedups)]


def test_a_speed_up_history_shows_1x_on_round_ticks():
    # 1.00 -> 1.11x filled the plot's height with no 1x line; ticks read 0.99, 1.02, 1.05;
    # the tok/s test's red point was drawn on the speed-up plot too.
    from specfleet.serve.svg import history_plot

    rows = _history_rows([1.06, 0.85, 1.11], changed_at=1)
    plot = history_plot(rows, speedup=True)
    labels = [label for _, label in plot.ticks]
    assert labels == ["0.85x", "0.90x", "0.95x", "1.00x", "1.05x", "1.10x"], labels
    one = dict((label, y) for y, label in plot.ticks)["1.00x"]
    assert plot.parity_y == one
    assert not any(p.changed for p in plot.points)
    assert [p.changed for p in history_plot(rows).points] == [False, True, False]
    assert history_plot(rows).parity_y is None
    gains = history_plot(_history_rows([1.4, 1.5], changed_at=-1), speedup=True)
    assert gains.ticks[-1][0] < gains.parity_y < gains.ticks[0][0] + 1  # 1x at its foot
    assert [label for _, label in history_plot(rows).ticks] == [
        "13.0", "13.5", "14.0", "14.5", "15.0", "15.5", "16.0"]


def test_a_history_line_stops_where_the_settings_change():
    # One line ran through a point measured at another token limit, as if the cell had sped
    # up; the difference was named only on hover and in the table.
    from specfleet.serve.app import _templates
    from specfleet.serve.svg import history_plot

    rows = _history_rows([1.06, 0.85, 1.11, 1.2], changed_at=-1)
    rows[2].differs = ("token limit", "host load (noisy runs)")
    rows[3].differs = ("host load (noisy runs)",)  # the hosts' state, no setting: joined
    plot = history_plot(rows)
    xs = [p.x for p in plot.points]
    assert [[float(xy.split(",")[0]) for xy in line.split()] for line in plot.lines] == [
        xs[:2], xs[2:]]
    (cut,) = plot.breaks
    assert xs[1] < cut.x < xs[2] and cut.title == "settings change: token limit"
    drawn = str(_templates().get_template("heatmap.html").module.plot(plot))
    assert drawn.count('<polyline class="line"') == 2
    assert '<g class="settings"><title>settings change: token limit</title>' in drawn
    # A point without a speed-up leaves its plot; the change it brought still cuts the line.
    rows[2].speedup = None
    ups = history_plot(rows, speedup=True)
    assert len(ups.lines) == 2 and ups.breaks[0].title == "settings change: token limit"
    unchanged = history_plot(_history_rows([1.06, 0.85], changed_at=-1))
    assert len(unchanged.lines) == 1 and unchanged.breaks == ()
