"""`specfleet replay` on what a store really holds: a generation job of one policy (its
counters still checked), a `--costs` file of another target (no "measured" against these
runs), stored values edited by hand (one line, not a traceback), and a file named as typed."""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.run import RunSpec, Target
from specfleet.store.store import open_store
from specfleet.workers.hardware import detect_host
from specfleet.workers.host import HostWorker

TARGET = Target(host="box1", engine="toy", device="cpu")
TEXT = "def add(a, b):\n    return a + b\n" * 2
TABLE = "ratio: [1.1, 1.3, 1.5, 1.7, 1.9, 2.1, 2.3, 2.5]\n"


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> dict[str, str]:
    """A store with matrix `cells` (plain and graded on one prompt) and a generation job of
    graded runs (no plain): its path and their ids."""
    path = str(tmp_path_factory.mktemp("replay-values") / "s.db")
    worker = HostWorker(info=detect_host("box1"), sample_period_s=0.05,
                        run_lock_path=str(tmp_path_factory.mktemp("lock") / "run.lock"))
    specs = [RunSpec(run_key=f"copy-{arm}", target=TARGET, model="script", prompt_name="copy",
                     prompt_text=TEXT, arm=arm, max_tokens=40) for arm in ("plain", "graded")]
    job_runs = [RunSpec(run_key=f"jobrun-{i}", target=TARGET, model="script", prompt_name=name,
                        prompt_text=TEXT, arm="graded", max_tokens=20)
                for i, name in enumerate(("a", "b"))]
    try:
        with open_store(path) as store:
            matrix_id = store.create_matrix("cells", {}, specs)
            for spec in specs:
                store.record_result(worker.run(spec.model_copy(update={"matrix_id": matrix_id})))
            job_id = store.create_generation_job("batch", TARGET, "script", job_runs,
                                                 params={"policy": "graded"})
            for spec in job_runs:
                store.record_result(worker.run(spec.model_copy(update={"job_id": job_id})))
            store.finish_generation_job(job_id, "done")
    finally:
        worker.close()
    return {"path": path, "matrix": matrix_id, "job": job_id}


def replay(path: str, ident: str, *args: str):
    return CliRunner().invoke(app, ["replay", ident, "--db", path, *args])


def edited(stored: dict[str, str], tmp_path, sql: str) -> str:
    path = str(tmp_path / "edited.db")
    shutil.copy(stored["path"], path)
    with sqlite3.connect(path) as conn:
        conn.execute(sql)
    return path


def test_a_job_of_one_policy_has_its_counters_checked(stored, tmp_path):
    # It was refused ("no cell has a done greedy plain run") with its counters never checked:
    # a wrong counter went unsaid.
    result = replay(stored["path"], stored["job"], "--costs", "apple-m4pro")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == ("counters: 2 stored lookup runs replayed, 0 differ from "
                                     "the stored counters")
    assert result.stderr.startswith(f"replay: no prediction for {stored['job']}: no cell has a "
                                    "done greedy plain run")
    path = edited(stored, tmp_path, "update runs set proposed = proposed + 5 "
                                    "where run_key = 'jobrun-0'")
    result = replay(path, "jobrun-0", "--costs", "apple-m4pro")
    assert result.exit_code == 1, result.output
    assert "1 differ from the stored counters" in result.stdout
    assert "jobrun-0: proposed replayed" in result.stderr


@pytest.mark.parametrize("run_key", ["copy-plain", "copy-graded"])
def test_a_token_count_that_is_not_its_replys_length_is_a_counter_that_differs(
        stored, tmp_path, run_key):
    """tok/s, decode tok/s and tokens per forward divide by `generated_tokens`: an edited
    count changed every rate shown while replay said "0 differ"."""
    path = edited(stored, tmp_path, "update runs set generated_tokens = generated_tokens - 1 "
                                    f"where run_key = '{run_key}'")
    result = replay(path, stored["matrix"], "--costs", "apple-m4pro")
    assert result.exit_code == 1, result.output
    assert f"{run_key}: generated_tokens stored 39, its stored reply holds 40 tokens" in \
        result.stderr


def test_a_table_of_another_target_is_no_check_of_these_runs(stored, tmp_path):
    # A file naming the runs' host filled "measured" and "error" from toy runs for an MLX
    # table of another model.
    other = tmp_path / "other.yaml"
    other.write_text("host: box1\nengine: mlx\ndevice: metal\nmodel: qwen3-8b\n" + TABLE)
    own = tmp_path / "own.yaml"
    own.write_text("host: box1\nengine: toy\ndevice: cpu\n" + TABLE)
    for table, measured in ((other, False), (own, True)):
        result = replay(stored["path"], stored["matrix"], "--costs", str(table),
                        "--policy", "graded")
        assert result.exit_code == 0, result.output
        (row,) = [line for line in result.stdout.splitlines() if line.startswith("| script")]
        assert (row.split("|")[11].strip() != "-") is measured, row


@pytest.mark.parametrize(("sql", "said"), [
    ("set token_ids = '[\"a\", 1]'", "runs.token_ids of run 'copy-plain' holds 'a', not a "
                                     "token id"),
    ("set token_ids = '[1, 99999999999999999999]'",
     "runs.token_ids of run 'copy-plain' holds 99999999999999999999, not a token id"),
    ("set prompt_token_ids = '[-5]'", "runs.prompt_token_ids of run 'copy-plain' holds -5, "
                                      "not a token id"),
    ("set loop_guard = '{\"min_period\": 1}'",
     "runs.loop_guard of run 'copy-plain' holds {'min_period': 1}, not counts min_period, "
     "max_period, repeats"),
])
def test_a_hand_edited_reply_or_guard_is_the_stores_one_line(stored, tmp_path, sql, said):
    # Each was a traceback from inside the replay (a TypeError, a KeyError, numpy's
    # "Maximum allowed dimension exceeded"), exit 1: replay's "counters differ".
    path = edited(stored, tmp_path, f"update runs {sql} where run_key = 'copy-plain'")
    result = replay(path, stored["matrix"], "--costs", "apple-m4pro")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        f"error: --db sqlite:///{path}: a stored value cannot be read ({said}); expected the "
        "store as specfleet wrote it (restore it from a backup)"]


def test_a_reply_its_stored_settings_do_not_give_is_one_line(stored, tmp_path):
    path = edited(stored, tmp_path, "update runs set max_tokens = 3 where run_key = 'copy-plain'")
    result = replay(path, stored["matrix"], "--costs", "apple-m4pro")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: run copy-plain: its stored reply (40 tokens, stop reason "
                           "max_tokens) is not what greedy decoding under its stored settings "
                           "(max_tokens 3) emits; expected the store as specfleet wrote it"), line


def test_a_costs_file_is_named_as_it_was_typed(stored, tmp_path, monkeypatch):
    # `./apple-m4pro` was said as `--costs apple-m4pro: no such file`, a packaged table's name.
    monkeypatch.chdir(tmp_path)
    result = replay(stored["path"], stored["matrix"], "--costs", "./apple-m4pro")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: --costs ./apple-m4pro: no such file; expected a YAML width-cost table (name, "
        "ratio: [cost of width 1, 2, ...])"]
