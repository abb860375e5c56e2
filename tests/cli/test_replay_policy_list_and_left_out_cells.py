"""`specfleet replay`: `--policy` read as every other list flag (comma-separated or
repeated), and a cell without a done plain run named, not dropped from the table unsaid."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.run import RunSpec, Target
from specfleet.store.store import open_store
from specfleet.workers.hardware import detect_host
from specfleet.workers.host import HostWorker

TARGET = Target(host="box1", engine="toy", device="cpu")
PROMPTS = {"copy": "def add(a, b):\n    return a + b\n" * 2, "prose": "Once upon a time, far."}
NOT_RUN = "copy-plain"  # left pending: the copy cell has a graded run and no plain one


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> tuple[str, str]:
    """(store path, matrix id): plain and graded on two prompts, all but `NOT_RUN` run."""
    path = str(tmp_path_factory.mktemp("replay-cells") / "s.db")
    specs = [RunSpec(run_key=f"{prompt}-{arm}", target=TARGET, model="script",
                     prompt_name=prompt, prompt_text=text, arm=arm, max_tokens=40)
             for prompt, text in PROMPTS.items() for arm in ("plain", "graded")]
    worker = HostWorker(info=detect_host("box1"), sample_period_s=0.05,
                        run_lock_path=str(tmp_path_factory.mktemp("lock") / "run.lock"))
    with open_store(path) as store:
        matrix_id = store.create_matrix("cells", {}, specs)
        try:
            for spec in specs:
                if spec.run_key != NOT_RUN:
                    store.record_result(worker.run(spec.model_copy(
                        update={"matrix_id": matrix_id})))
        finally:
            worker.close()
    return path, matrix_id


def replay(db: tuple[str, str], *args: str):
    path, matrix_id = db
    return CliRunner().invoke(app, ["replay", matrix_id, "--costs", "apple-m4pro",
                                    "--db", path, *args])


def policies_replayed(stdout: str) -> list[str]:
    return [line.split("|")[4].strip() for line in stdout.splitlines()
            if line.startswith("| script")]


def test_a_repeated_policy_flag_replays_every_policy_it_names(db):
    # It replayed the last one alone: `--policy graded --policy gated` was gated's table.
    result = replay(db, "--policy", "graded", "--policy", "gated,calibrated")
    assert result.exit_code == 0, result.output
    assert policies_replayed(result.stdout) == ["graded", "gated", "calibrated"]


def test_an_empty_name_in_the_policy_list_is_refused_as_other_lists_refuse_it(db):
    # `graded,,gated` replayed graded and gated without a word, where bench's and
    # selftest's lists refuse the empty name.
    result = replay(db, "--policy", "graded,,gated")
    assert result.exit_code == 2, result.output
    assert result.stderr.splitlines() == [
        "error: --policy: an empty name in 'graded,,gated'; expected comma-separated names"]


def test_without_policy_every_policy_is_replayed(db):
    result = replay(db)
    assert result.exit_code == 0, result.output
    assert policies_replayed(result.stdout) == ["graded", "gated", "calibrated"]


def test_a_cell_without_a_done_plain_run_is_named_not_dropped_unsaid(db):
    # The copy cell's graded run vanished from the table: only prose was shown, no word why.
    result = replay(db, "--policy", "graded")
    assert result.exit_code == 0, result.output
    assert [line.split("|")[3].strip() for line in result.stdout.splitlines()
            if line.startswith("| script")] == ["prose"]
    assert result.stderr.splitlines() == [
        "replay: 1 cell left out, without a done greedy plain run keeping its token ids: "
        "box1/toy/cpu script copy"]
