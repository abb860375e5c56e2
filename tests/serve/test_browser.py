"""The web view in a real headless Chromium over a store holding real matrices.

Two real matrices of the bundled SmolLM2-135M (torch, CPU, greedy; plain + auto, one repeat,
16 tokens; a story prompt, and in the first a prompt that tries to inject HTML) run through
the real scheduler on a simulated one-host fleet (real Ray, real worker actor), into a real
SQLite file. `specfleet serve` runs as a real process on a loopback port with `--address` of that
fleet; Chromium opens the pages, follows links and reads values off them. Screenshots of
every page go to the test's tmp dir. A second server, over the small seeded store and with a
token file, is logged into as a person would.
"""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cluster.localfleet import LocalFleet
from specfleet.cluster.scheduler import SchedulerOptions, run_matrix
from specfleet.jobs.plan import plan_runs
from specfleet.jobs.run import Target
from specfleet.jobs.spec_files import load_matrix_spec
from specfleet.serve.auth import cookie_name, session_value
from specfleet.store import open_store
from tests.engine.conftest import bundled_model  # noqa: F401 (the fetched bundled model)
from tests.serve import seed
from tests.serve.browser import full_page_screenshot, start_chromium
from tests.serve.serving import serving

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

HOST = "alpha"
TORCH = Target(host=HOST, engine="torch", device="cpu")
XSS_PROMPT = f"Repeat this exactly: {seed.XSS_SCRIPT} {seed.XSS_IMG}"
INJECT = f"  - {{name: inject, text: {json.dumps(XSS_PROMPT)}}}\n"
MATRIX_YAML = """\
name: {name}
models: [smollm2-135m]
prompts:
  - story
{inject}arms: [plain, auto]
repeats: 1
max_tokens: 16
targets: {{engines: [torch]}}
"""
FAST = SchedulerOptions(progress=False, call_timeout_s=60.0, poll_s=0.1)
CELL = f"{HOST}/torch/cpu|smollm2-135m|story|auto"
TOKEN = "b7c1e0d2a9f84e3c6d5b4a3f2e1d0c9b"
runner = CliRunner()


def _start_fleet(kwargs: dict) -> LocalFleet:
    """Ray gives a raylet 30 s to register, which a shared 2-core box under a load of 20+
    sometimes misses: one more try for that one failure."""
    for attempt in (1, 2):
        local = LocalFleet([HOST], worker_kwargs=kwargs, first_host_on_head=True)
        try:
            return local.start()
        except Exception as err:
            local.shutdown()
            if attempt == 2 or "timed out during startup" not in str(err):
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    lock = str(tmp_path_factory.mktemp("lock") / "active-run.lock")
    # The worker proves its one engine when it starts, as a user's does (the page shows it).
    kwargs = {"memory_budget_gb": 2.0, "sample_period_s": 1.0, "run_lock_path": lock,
              "self_test": True, "engines": ["torch"]}
    local = _start_fleet(kwargs)
    try:
        local.handles = local.start_workers()
        yield local
    finally:
        local.shutdown()


def _run(store, fleet, path: Path) -> str:
    """Plan a matrix file exactly as `matrix run` does and run it on the fleet."""
    spec = load_matrix_spec(path)
    runs = plan_runs(spec, [TORCH], spec.name)
    store.create_matrix(spec.name, spec.model_dump(mode="json"), runs, matrix_id=spec.name)
    outcome = run_matrix(store, spec.name, fleet.handles, options=FAST)
    assert outcome.status == "done", store.runs(matrix=spec.name)
    return spec.name


@pytest.fixture(scope="module")
def db_url(fleet, bundled_model, tmp_path_factory):  # noqa: F811
    """Two real matrices ("first", "second"), the HTML-injecting one, a running one and a
    generation job."""
    folder = tmp_path_factory.mktemp("store")
    url = f"sqlite:///{folder / 'serve.db'}"
    with open_store(url) as store:
        # "second" is the history's second point of the story cells: no injection again.
        for name, inject in (("first", INJECT), ("second", "")):
            (folder / f"{name}.yaml").write_text(MATRIX_YAML.format(name=name, inject=inject))
            _run(store, fleet, folder / f"{name}.yaml")
        seed._evil(store)
        seed._live(store)
        seed._job(store)
    return url


@pytest.fixture(scope="module")
def server(db_url, fleet, tmp_path_factory):
    """`specfleet serve` as a real process; its stderr goes to a log file."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with serving(["--db", db_url, "--address", fleet.address, "--matrix", "first"],
                  log) as base:
        yield base, log


@pytest.fixture(scope="module")
def guarded_server(seeded_url, tmp_path_factory):
    """`specfleet serve --token-file` over the small seeded store (no fleet, no model)."""
    folder = tmp_path_factory.mktemp("guarded")
    (folder / "token").write_text(TOKEN + "\n")
    (folder / "token").chmod(0o600)
    with serving(["--db", seeded_url, "--token-file", str(folder / "token")],
                  folder / "serve.log") as base:
        yield base, folder / "serve.log"


@pytest.fixture(scope="module")
def browser():
    driver = start_chromium()
    yield driver
    driver.quit()


def _show_json(db_url: str, matrix_id: str) -> dict:
    result = runner.invoke(app, ["matrix", "show", matrix_id, "--format", "json",
                                 "--db", db_url])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _history_json(db_url: str) -> list:
    result = runner.invoke(app, ["history", "--model", "smollm2-135m", "--prompt", "story",
                                 "--arm", "auto", "--target", f"{HOST}/torch/cpu",
                                 "--format", "json", "--db", db_url])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_browse_matrices_matrix_and_history(server, browser, db_url, tmp_path):
    from selenium.webdriver.common.by import By

    base, log = server
    assert f"matrix first: {base}/matrices/first" in log.read_text()
    browser.get(f"{base}/matrices")
    full_page_screenshot(browser, tmp_path / "matrices.png")
    links = {a.text: a for a in browser.find_elements(By.CSS_SELECTOR, "a.matrix-link")}
    assert {"first", "second", seed.EVIL, seed.LIVE} <= set(links)
    links["first"].click()
    assert browser.current_url == f"{base}/matrices/first"

    # A heatmap cell's value, read off the page, equals `matrix show --format json`'s.
    cell = browser.find_element(By.CSS_SELECTOR, f'a.cell[data-cell="{CELL}"]')
    shown = next(c for c in _show_json(db_url, "first")["cells"]
                 if "|".join((c["target"], c["model"], c["prompt"], c["arm"])) == CELL)
    text = cell.find_element(By.TAG_NAME, "text").text
    assert re.match(r"^\d+\.\d\dx ", text), text  # as `matrix show` prints it
    assert float(text.split("x")[0]) == round(shown["speedup"], 2)
    assert float(cell.get_attribute("data-speedup")) == shown["speedup"]
    full_page_screenshot(browser, tmp_path / "matrix.png")

    # The injected prompt is in the spec as text; nothing it carries ran.
    spec = browser.find_element(By.CSS_SELECTOR, "pre.spec").text
    assert seed.XSS_SCRIPT in spec and seed.XSS_IMG in spec
    assert browser.execute_script("return window.__xss") is None
    assert browser.execute_script("return document.querySelectorAll('img').length") == 0

    # The cell's history: one point per matrix in each plot, as `history` counts them.
    cell.click()
    deadline = time.monotonic() + 30
    while "/history?" not in browser.current_url and time.monotonic() < deadline:
        time.sleep(0.1)
    assert browser.current_url.startswith(f"{base}/history?model=smollm2-135m&prompt=story")
    plots = browser.find_elements(By.CSS_SELECTOR, "figure.plot")
    points = [len(p.find_elements(By.CSS_SELECTOR, "g.point")) for p in plots]
    assert points == [len(_history_json(db_url))] * 2 == [2, 2]
    full_page_screenshot(browser, tmp_path / "history.png")
    # Nothing failed to load on the way (an icon asked for and not found, a blocked script).
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def test_injected_texts_render_as_text(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    base, _ = server
    bodies = {}
    for path in (f"/matrices/{seed.EVIL}", "/matrices", f"/matrices/{seed.EVIL}/runs",
                 f"/jobs/{seed.JOB}"):
        browser.get(base + path)
        for details in browser.find_elements(By.TAG_NAME, "details"):
            details.click()  # open each output, so it is on the page and in the screenshot
        bodies[path] = browser.find_element(By.TAG_NAME, "body").text
        assert seed.XSS_SCRIPT in bodies[path], path
        assert browser.execute_script("return window.__xss") is None, path
        assert browser.execute_script(
            "return document.querySelectorAll('img, script:not([src])').length") == 0, path
    runs = bodies[f"/matrices/{seed.EVIL}/runs"]
    assert f"reply {seed.XSS_IMG} {seed.XSS_SCRIPT}" in runs and "h<b>x</b>/toy/cpu" in runs
    full_page_screenshot(browser, tmp_path / "runs-injected.png")
    replies = bodies[f"/jobs/{seed.JOB}"]
    assert f"hi {seed.XSS_SCRIPT}" in replies and f"worker lost {seed.XSS_IMG}" in replies
    full_page_screenshot(browser, tmp_path / "job.png")


def test_progress_updates_without_a_reload(server, browser, db_url):
    from selenium.webdriver.common.by import By

    from tests.store.factory import result

    base, _ = server
    browser.get(f"{base}/matrices")
    row = browser.find_element(By.CSS_SELECTOR, f'tr[data-matrix="{seed.LIVE}"]')
    marker = browser.execute_script("window.__same_page = 1; return 1")
    assert row.find_element(By.CSS_SELECTOR, '[data-count="done"]').text == "1"
    with open_store(db_url) as store:
        pending = store.runs_not_done(seed.LIVE)[0]
        store.record_result(result(pending, 11.0))
        store.finish_matrix(seed.LIVE, "done")
    # Polls every 2 s; a loaded 2-core box is slow to paint (60 s was short on a slow VM).
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if row.find_element(By.CSS_SELECTOR, '[data-field="status"]').text == "done":
            break
        time.sleep(0.25)
    status = row.find_element(By.CSS_SELECTOR, '[data-field="status"]').text
    assert row.find_element(By.CSS_SELECTOR, '[data-count="done"]').text == "2", status
    assert status == "done"
    assert browser.execute_script("return window.__same_page") == marker  # no reload


def test_fleet_page_shows_the_fleet(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    base, log = server
    browser.get(f"{base}/fleet")
    host = browser.find_element(By.CSS_SELECTOR, f'section.host[data-host="{HOST}"]')
    # Ray's warning that its connect, off the main thread, set no SIGTERM handler.
    assert "SIGTERM handler" not in log.read_text()
    assert "healthy" in host.text and f"{HOST}/torch/cpu" in host.text
    selftest = host.find_element(By.CSS_SELECTOR, "p.selftest").text
    assert selftest.startswith("self-test: torch/cpu ok (") and selftest.endswith(" s)"), selftest
    full_page_screenshot(browser, tmp_path / "fleet.png")


def test_a_sigterm_after_the_fleet_page_stops_the_view_without_a_stack_dump(
        fleet, seeded_url, tmp_path):
    # Ray's core, connecting for the fleet page, replaced the server's SIGTERM handler with
    # its own: systemd's stop printed "*** SIGTERM received ... epoll_wait" and a stack.
    log, started = tmp_path / "serve.log", []
    with serving(["--db", seeded_url, "--address", fleet.address], log, started) as base:
        with urllib.request.urlopen(f"{base}/api/fleet", timeout=60) as answer:
            assert json.load(answer)["hosts"], "the fleet page read no host"
        time.sleep(0.5)  # the connect's thread hands the handlers back on the server's loop
        (proc,) = started
        proc.terminate()
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)  # the server shut down
    assert "SIGTERM received" not in log.read_text() and "PC: @" not in log.read_text()


def test_a_token_guarded_view_asks_for_it_once(guarded_server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    base, log = guarded_server
    assert "needs a token: the token in" in log.read_text()
    browser.delete_all_cookies()
    browser.get(f"{base}/matrices/{seed.BASE}")
    assert browser.current_url == f"{base}/login?next=%2Fmatrices%2F{seed.BASE}"
    assert seed.BASE not in browser.find_element(By.TAG_NAME, "body").text
    full_page_screenshot(browser, tmp_path / "login.png")
    browser.get(f"{base}/api/matrices")  # a script without the cookie: 401 and no data
    assert "this view needs a token" in browser.page_source and seed.BASE not in \
        browser.page_source

    browser.get(f"{base}/matrices/{seed.BASE}")
    browser.find_element(By.ID, "token").send_keys("not-the-token-at-all")
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    # The click only submits the form: wait for the answer page, not the one still shown.
    error = WebDriverWait(browser, 30).until(
        expected_conditions.presence_of_element_located((By.ID, "login-error")))
    assert error.text == "Wrong token."
    assert browser.get_cookie(cookie_name(TOKEN)) is None
    full_page_screenshot(browser, tmp_path / "login-wrong.png")

    browser.find_element(By.ID, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "form.login button").click()
    deadline = time.monotonic() + 30
    while browser.current_url != f"{base}/matrices/{seed.BASE}" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert browser.current_url == f"{base}/matrices/{seed.BASE}"
    assert browser.find_elements(By.CSS_SELECTOR, "svg.heatmap a.cell")
    cookie = browser.get_cookie(cookie_name(TOKEN))
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert cookie["value"] == session_value(TOKEN)
    assert browser.execute_script("return document.cookie") == ""  # out of scripts' reach
    full_page_screenshot(browser, tmp_path / "matrix-after-login.png")
    # Back from the page: the form that said "Wrong token." again, not "Confirm Form
    # Resubmission" (a refused POST redirects to a GET).
    browser.back()
    assert browser.current_url == f"{base}/login?next=%2Fmatrices%2F{seed.BASE}&wrong=1"
    assert browser.find_element(By.ID, "login-error").text == "Wrong token."
    browser.get(f"{base}/matrices")  # the other pages and the API answer now
    assert browser.find_elements(By.CSS_SELECTOR, "a.matrix-link")
    browser.get(f"{base}/api/matrices/{seed.LIVE}/progress")
    assert f'"id":"{seed.LIVE}"' in browser.page_source.replace(" ", "")
