"""Issue 7 end to end: numbers people can trust, proven on the real parts.

One simulated host (`LocalFleet`, real Ray, real worker actor) runs two real matrices of the
bundled SmolLM2-135M (torch, CPU, greedy) through the real scheduler into a real SQLite store:

1. a prompt the model answers with a loop (`gcc -w -w -w ...`) and one it answers without
   (specfleet/configs/prompts/story.txt), plain + graded, no loop guard: the looping cell is flagged
   (LOOP in the tables and in `history`), kept out of the headline and listed apart;
2. the looping prompt again with `loop_guard: "1,32,4"`: both arms stop early, same tokens;
3. a toy run next to two busy processes is stored `noisy`; `require_quiet` waits, with a
   visible reason, until the test ends them, then runs quiet;
4. provenance of a stored run, and `specfleet compare` refusing to call a slow-down a
   regression when the weights or the engine config differ (`--allow-mixed` lifts it).

specfleet/configs/prompts/looping.txt (an email) did not loop within 80 greedy tokens on torch here, so
the looping prompt is inline: the model keeps emitting `-w` far past the ten asked for.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
import ray
from rich.console import Console
from typer.testing import CliRunner

import specfleet
from specfleet.cli.main import app
from specfleet.cluster.localfleet import LocalFleet
from specfleet.cluster.progress import HostProgress, ProgressEvent, WaitingLines
from specfleet.cluster.scheduler import SchedulerOptions, run_matrix
from specfleet.configs import prompts_dir
from specfleet.engine.stats import loop_guard_fires
from specfleet.jobs.plan import plan_runs
from specfleet.jobs.run import RunSpec, Target
from specfleet.jobs.spec_files import load_matrix_spec
from specfleet.report.history import cell_history, render_history
from specfleet.report.results import render_matrix
from specfleet.stats.cells import LOOP_SHARE_FLAG, summarize
from specfleet.store import open_store
from specfleet.workers import actor
from specfleet.workers.host import HostWorker
from tests.engine.conftest import bundled_model  # noqa: F401 (the fetched bundled model)

# Slow: the tests that use the fleet and the bundled model (the fixtures take ~30-60 s here).
pytestmark = [pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parent.parent
HOST = "alpha"
TORCH = Target(host=HOST, engine="torch", device="cpu")
MODEL = "smollm2-135m"
LOOP_PROMPT = "Write a shell command that passes the -w flag ten times: gcc -w -w -w"
MAX_TOKENS = 40
GUARD = {"min_period": 1, "max_period": 32, "repeats": 4}
FAST = SchedulerOptions(progress=False, call_timeout_s=30.0, poll_s=0.1)
MATRIX_YAML = """\
name: {name}
models: [{model}]
prompts:
  - {{name: flags, text: {prompt}}}
{extra}arms: [plain, graded]
repeats: 1
max_tokens: {max_tokens}
prompt_dir: {prompt_dir}
targets: {{engines: [torch]}}
"""


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    # Own run-lock file: other developers' workers on this machine must not make ours noisy.
    lock = str(tmp_path_factory.mktemp("lock") / "active-run.lock")
    kwargs = {"memory_budget_gb": 2.0, "sample_period_s": 1.0, "run_lock_path": lock}
    with LocalFleet([HOST], worker_kwargs=kwargs, first_host_on_head=True) as local:
        local.handles = local.start_workers()
        yield local


@pytest.fixture(scope="module")
def db_url(tmp_path_factory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('store') / 'trust.db'}"


def _run_matrix_file(store, fleet, path: Path) -> str:
    """Plan a matrix YAML file exactly as `matrix run` does and run it on the fleet."""
    spec = load_matrix_spec(path)
    matrix_id = spec.name
    runs = plan_runs(spec, [TORCH], matrix_id)
    store.create_matrix(spec.name, spec.model_dump(mode="json"), runs, matrix_id=matrix_id)
    outcome = run_matrix(store, matrix_id, fleet.handles, options=FAST)
    assert outcome.status == "done", store.runs(matrix=matrix_id)
    return matrix_id


@pytest.fixture(scope="module")
def matrices(fleet, db_url, bundled_model, tmp_path_factory):  # noqa: F811
    """Matrix "loops" (looping + story prompts, no guard) and "guarded" (looping, guard on)."""
    folder = tmp_path_factory.mktemp("matrices")
    common = dict(model=MODEL, prompt=json.dumps(LOOP_PROMPT), max_tokens=MAX_TOKENS,
                  prompt_dir=prompts_dir())
    (folder / "loops.yaml").write_text(MATRIX_YAML.format(name="loops", extra="  - story\n",
                                                          **common))
    guard = ",".join(str(v) for v in GUARD.values())
    (folder / "guarded.yaml").write_text(
        MATRIX_YAML.format(name="guarded", extra="", **common) + f'loop_guard: "{guard}"\n')
    with open_store(db_url) as store:
        return {name: _run_matrix_file(store, fleet, folder / f"{name}.yaml")
                for name in ("loops", "guarded")}


def _rows(db_url: str, matrix_id: str) -> dict[tuple[str, str], object]:
    with open_store(db_url) as store:
        return {(r.prompt_name, r.arm): r for r in store.runs(matrix=matrix_id)}


# ---- 1. a looping cell is flagged and kept out of the headline ---------------------------


@pytest.mark.slow
def test_looping_cell_is_flagged_listed_apart_and_kept_out_of_the_headline(matrices, db_url):
    rows = _rows(db_url, matrices["loops"])
    assert {r.status for r in rows.values()} == {"done"} and len(rows) == 4
    for arm in ("plain", "graded"):  # check the text, not only the numbers
        flags, story = rows[("flags", arm)], rows[("story", arm)]
        assert "-w -w -w -w -w -w" in flags.output_text and flags.loop_share > 0.5, flags
        assert story.loop_share <= LOOP_SHARE_FLAG and len(set(story.token_ids)) > 20, story
        assert flags.stop_reason == "max_tokens" and flags.generated_tokens == MAX_TOKENS

    with open_store(db_url) as store:
        summary = summarize(store.runs(matrix=matrices["loops"]))
        markdown = render_matrix(store, matrices["loops"], "markdown")
        cells = json.loads(render_matrix(store, matrices["loops"], "json"))["cells"]
        history = cell_history(store, MODEL, "flags", "graded")
    assert [u.key.prompt for u in summary.looping] == ["flags"]  # apart, not dropped
    assert [u.key.prompt for u in summary.speedups] == ["story"]
    (graded,) = [h for h in summary.headline if h.arm == "graded"]
    assert (graded.cells, graded.looping_excluded) == (1, 1)
    assert graded.geomean_speedup == pytest.approx(summary.speedups[0].ratio)

    loop_flags = {c["prompt"]: c["loop"] for c in cells if c["arm"] == "graded"}
    assert loop_flags == {"flags": True, "story": False}
    graded_row = next(line for line in markdown.splitlines()
                      if line.startswith("|") and "| graded |" in line)
    flags_col, story_col = [c.strip() for c in graded_row.strip("|").split("|")][2:4]
    assert "LOOP" in flags_col and "LOOP" not in story_col, graded_row
    assert "Headline graded:" in markdown and "over 1 cell (" in markdown
    assert f"Kept out of the graded headline (replies loop): {MODEL}/flags" in markdown
    assert history and history[-1].loop
    assert "LOOP" in render_history(history, "flags graded")


# ---- 2. the loop guard stops the loop; plain and prompt lookup stop at the same token -----


@pytest.mark.slow
def test_loop_guard_stops_the_reply_early_and_both_arms_match(matrices, db_url):
    guarded = _rows(db_url, matrices["guarded"])
    unguarded = _rows(db_url, matrices["loops"])
    plain, graded = guarded[("flags", "plain")], guarded[("flags", "graded")]
    for row in (plain, graded):
        assert row.stop_reason == "loop_guard" and row.generated_tokens < MAX_TOKENS, row
        assert row.engine_config["loop_guard"] == GUARD
    assert graded.token_ids == plain.token_ids  # parity holds with the guard on
    tokens = plain.token_ids
    # Stopped at the first token where the guard fires, on the same reply as without it.
    assert tokens == unguarded[("flags", "plain")].token_ids[: len(tokens)]
    assert loop_guard_fires(tokens, *GUARD.values())
    assert not loop_guard_fires(tokens[:-1], *GUARD.values())
    assert graded.accepted > 0  # prompt lookup really drafted the loop before it stopped


# ---- 3. a busy neighbour: flagged noisy; --require-quiet waits until it is gone ----------


# Busy a quarter of the time: 0.5 cores for two, five times the test's threshold, without
# taking both cores from the suite's other workers for the test's ~40 s.
BUSY_LOOP = """
import time
while True:
    start = time.perf_counter()
    while time.perf_counter() - start < 0.005:
        pass
    time.sleep(0.015)
"""


def _busy(n: int = 2) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n)]


def _toy_matrix(store, name: str) -> str:
    spec = RunSpec(run_key=f"{name}-0", matrix_id=name, model="script:1ms", prompt_name="p",
                   prompt_text="hello world " * 4, arm="plain", max_tokens=8,
                   target=Target(host=HOST, engine="toy", device="cpu"))
    return store.create_matrix(name, {"name": name}, [spec], matrix_id=name)


def _utc_ts(moment: datetime) -> float:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


@pytest.mark.slow
def test_busy_neighbour_flags_noisy_and_require_quiet_waits_for_it(fleet, db_url, tmp_path):
    # This 2-core machine is shared with other developers' tests, so "quiet" cannot mean the
    # whole machine here. The worker's meter watches only the two busy processes this test
    # starts (HostWorker(quiet_pids=...)), with a low threshold (0.05 busy cores per core =
    # 0.1 cores): two `while True` loops stay above it even when the machine is crowded, and
    # are at 0 once killed. The whole-machine meter is proven in tests/workers/test_hardware.
    busy = _busy()
    loud = None
    try:
        loud = actor.WorkerActor.options(
            num_cpus=0, label_selector={actor.HOST_LABEL: HOST}, max_restarts=0
        ).remote(HOST, {"sample_period_s": 1.0, "quiet_pids": [p.pid for p in busy],
                        "quiet_threshold_per_core": 0.05,
                        "run_lock_path": str(tmp_path / "lock")})
        actor.wait_ready(loud, 120)  # a worker's start on a loaded 2-core box
        with open_store(db_url) as store:
            noisy_id = _toy_matrix(store, "busy")
            assert run_matrix(store, noisy_id, {HOST: loud}, options=FAST).done == 1
            (noisy,) = store.runs(matrix=noisy_id)
            assert noisy.noisy is True and noisy.status == "done"

            quiet_id = _toy_matrix(store, "quiet")
            killed_at: list[float] = []
            events: list = []
            said_waiting = threading.Event()

            def note(event) -> None:
                events.append(event)
                if event.status == "waiting":
                    said_waiting.set()

            def end_the_load() -> None:
                said_waiting.wait(timeout=60)  # the load ends once the wait was said
                for proc in busy:
                    proc.kill()
                    proc.wait(timeout=10)
                killed_at.append(time.time())

            killer = threading.Thread(target=end_the_load, daemon=True)
            killer.start()
            started = time.monotonic()
            outcome = run_matrix(store, quiet_id, {HOST: loud}, note,
                                 options=replace(FAST, require_quiet=True, quiet_wait_s=90.0))
            waited_s = time.monotonic() - started
            killer.join(timeout=15)
            (quiet,) = store.runs(matrix=quiet_id)
    finally:
        for proc in busy:
            proc.kill()
        if loud is not None:
            ray.kill(loud)
    assert outcome.done == 1 and quiet.status == "done"
    assert waited_s < 60, waited_s  # it ran once the load was gone, not after quiet_wait_s
    assert _utc_ts(quiet.started_at) >= killed_at[0] - 0.5  # only after the load was gone
    assert quiet.noisy is False
    waiting = [e for e in events if e.status == "waiting"]
    assert waiting and waiting[0].reason.startswith("other processes keep"), events
    assert events.index(waiting[0]) < [e.status for e in events].index("running")


def test_the_progress_bar_and_the_cli_say_why_a_host_waits(capsys):
    out = io.StringIO()
    reason = "other processes keep 1.93 cores busy (limit 0.10)"
    with HostProgress({HOST: 2}, console=Console(file=out, width=160)) as bars:
        bars.update(ProgressEvent(HOST, "k", "waiting", 0, 0, 2, "healthy", reason))
    assert f"waiting: {reason}" in out.getvalue()
    now = [0.0]
    say = WaitingLines(clock=lambda: now[0])

    def wait(at: float, busy: str) -> None:
        now[0] = at
        say(ProgressEvent(HOST, "k", "waiting", 0, 0, 2, "healthy",
                          f"other processes keep {busy} cores busy (limit 0.10)"))

    wait(0.0, "1.93")
    for second in range(1, 10):  # the check answers once a second: said once in 10 s
        wait(float(second), "1.85")
    wait(10.0, "1.71")
    now[0] = 11.0  # another cause is said at once
    say(ProgressEvent(HOST, "k", "waiting", 0, 0, 2, "healthy", "host throttled: on battery"))
    say(ProgressEvent(HOST, "k", "running", 0, 0, 2, "healthy"))
    wait(11.5, "1.66")  # a new wait after a run is said at once
    assert capsys.readouterr().err.splitlines() == [
        f"{HOST}: waiting for a quiet host: {reason}",
        f"{HOST}: waiting for a quiet host: other processes keep 1.71 cores busy (limit 0.10)",
        f"{HOST}: waiting for a quiet host: host throttled: on battery",
        f"{HOST}: waiting for a quiet host: other processes keep 1.66 cores busy (limit 0.10)"]


# ---- 4. provenance, and compare refusing mixed cells ------------------------------------


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


@pytest.mark.slow
def test_a_stored_run_says_what_produced_it(matrices, db_url, fleet, bundled_model):  # noqa: F811
    run = _rows(db_url, matrices["loops"])[("story", "graded")]
    versions = run.versions
    assert versions["specfleet"] == specfleet.__version__
    commit = versions["specfleet_commit"]
    # Others commit to this checkout meanwhile: the worker's commit is HEAD or an ancestor.
    assert _git("merge-base", "--is-ancestor", commit, "HEAD").returncode == 0, commit
    for library in ("torch", "transformers", "ray"):
        assert versions[library] == importlib.metadata.version(library), library
    assert run.weights_hash == bundled_model.torch.weights_hash and len(run.weights_hash) >= 32
    story = (prompts_dir() / "story.txt").read_text().rstrip("\r\n")
    assert run.prompt_hash == hashlib.sha256(story.encode()).hexdigest()
    config = run.engine_config
    assert (config["engine"], config["device"], config["policy"]) == ("torch", "cpu", "graded")
    assert config["lookup"] == {"ngram_max": 3, "ngram_min": 2, "max_draft": 7,
                                "adaptive": True, "policy": "graded", "costs": []}
    assert config["warmed"] is True and config["loop_guard"] is None
    info = ray.get(fleet.handles[HOST].info.remote(), timeout=30)
    assert run.host_fingerprint == info["fingerprint"] and run.host_fingerprint
    assert run.load_before is not None and run.load_after is not None


def _seed(store, worker: HostWorker, matrix_id: str, rates, max_tokens: int = 16,
          **update) -> None:
    """Three repeats of one toy cell, stored with the given tok/s and provenance changes."""
    specs = [RunSpec(run_key=f"{matrix_id}-{i}", matrix_id=matrix_id, model="script",
                     prompt_name="copy", prompt_text="hello world hello world", arm="graded",
                     repeat=i, max_tokens=max_tokens, target=Target(host="h1", engine="toy",
                                                            device="cpu"))
             for i in range(len(rates))]
    store.create_matrix(matrix_id, {"name": matrix_id}, specs, matrix_id=matrix_id)
    for spec, rate in zip(specs, rates, strict=True):
        result = worker.run(spec)
        changed = {k: (v(result) if callable(v) else v) for k, v in update.items()}
        store.record_result(result.model_copy(update={"tok_per_s": rate, **changed}))
    store.finish_matrix(matrix_id, "done")


def _compare(db_url: str, a: str, b: str, *flags: str) -> tuple[list[dict], str]:
    runner = CliRunner()
    # --fail-on none: this test reads verdicts; the exit status on a regression is tested apart.
    args = ["compare", a, b, "--db", db_url, "--fail-on", "none", *flags]
    as_json = runner.invoke(app, [*args, "--format", "json"])
    table = runner.invoke(app, args, env={"COLUMNS": "250"})
    assert as_json.exit_code == 0 and table.exit_code == 0, (as_json.output, table.output)
    return json.loads(as_json.output)["cells"], table.output


def test_compare_calls_no_regression_across_weights_config_or_token_limit(tmp_path):
    url = f"sqlite:///{tmp_path / 'compare.db'}"
    worker = HostWorker("h1", run_lock_path=str(tmp_path / "lock"), quiet_threshold_per_core=1e9)
    slower = (80.0, 81.0, 79.0)
    with open_store(url) as store:
        _seed(store, worker, "base", (100.0, 101.0, 99.0))
        _seed(store, worker, "code", slower, versions=lambda r: {
            **r.versions, "specfleet_commit": "0123456789ab"})
        _seed(store, worker, "weights", slower, weights_hash="f" * 64)
        _seed(store, worker, "config", slower, engine_config=lambda r: {
            **r.engine_config, "lookup": {**r.engine_config["lookup"], "max_draft": 4}})
        _seed(store, worker, "rule", slower, engine_config=lambda r: {
            **r.engine_config, "policy_revision": r.engine_config["policy_revision"] + 1})
        _seed(store, worker, "limit", slower, max_tokens=8)
    worker.close()

    for code in ("code", "rule"):  # only the code (or a policy's rule) changed: a regression
        (row,), _ = _compare(url, "base", code)
        assert (row["verdict"], row["differs"]) == ("regression", []), code
    for other, part in (("weights", "weights hash"), ("config", "engine config"),
                        ("limit", "token limit")):
        (row,), table = _compare(url, "base", other)
        assert (row["verdict"], row["differs"]) == ("slower", [part]), row
        assert f"not called a regression, the cells differ in {part}" in table
        assert "0 regressions in 1 cell measured" in table
        (row,), table = _compare(url, "base", other, "--allow-mixed")
        assert row["verdict"] == "regression" and f"differ in {part}" in table
