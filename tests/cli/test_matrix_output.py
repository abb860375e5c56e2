"""What `matrix run`, `resume` and `bench` print when a matrix ends, on a real seeded store
without a fleet: the tables alone on stdout in every format (`-o md > x.md`), the run's own
words on stderr; `matrix status`'s lines of an unfinished run; the note under cells that
mix two sessions' runs; and a resume refused, before any fleet, for a model folder gone."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.cli.matrix import planned_line, refuse_unrunnable_models
from specfleet.cli.matrix_output import print_outcome
from specfleet.errors import UserError
from specfleet.jobs.run import RunSpec, Target
from specfleet.report.record import record_markdown
from specfleet.report.results import render_matrix
from specfleet.store.store import open_store
from specfleet.workers.host import HostWorker
from tests.report.seed import H1, H2, PLAIN_RATES, Seed, seed_matrix
from tests.store.factory import grid, result

MATRIX_ID = "out-000001"
UNFINISHED_ID = "left-000002"


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "specfleet.db"
    worker = HostWorker("h1", sample_period_s=3600.0, quiet_threshold_per_core=1e9)
    store = open_store(str(path))
    try:
        seed_matrix(store, worker, "out", [
            Seed(H1, "script", "copy", "plain", tuple(PLAIN_RATES)),
            Seed(H1, "script", "copy", "graded", (150.0, 152.0, 148.0))], MATRIX_ID)
        left = RunSpec(run_key=f"{UNFINISHED_ID}/r", matrix_id=UNFINISHED_ID, target=H1,
                       model="script", prompt_name="copy", prompt_text="hello hello",
                       arm="graded", repeat=1, max_tokens=16)
        store.create_matrix("left", {"name": "left"}, [left], matrix_id=UNFINISHED_ID)
        store.mark_interrupted(left.run_key, "host h1 went away")
        store.finish_matrix(UNFINISHED_ID, "interrupted")
    finally:
        store.close()
        worker.close()
    return path


def outcome(status: str = "done") -> SimpleNamespace:
    return SimpleNamespace(matrix_id=MATRIX_ID, status=status, done=6, failed=0, interrupted=0,
                           pending=0, wall_s=1.5, skipped=0, owner=None)


@pytest.mark.parametrize("fmt", ["table", "markdown", "csv", "json"])
def test_the_tables_alone_go_to_stdout_in_every_format(db_path, capsys, fmt) -> None:
    # With -o md or csv stdout began "matrix out-...: done (...)" and ended "matrix id: ...".
    with open_store(str(db_path)) as store:
        print_outcome(store, outcome("interrupted"), fmt)
        tables = render_matrix(store, MATRIX_ID, fmt)
    said = capsys.readouterr()
    assert said.out == tables
    assert said.err.splitlines() == [
        f"matrix {MATRIX_ID}: interrupted (6 done, 0 failed, 0 interrupted, 0 pending this "
        "call; 1.5 s)",
        f"resume with: specfleet matrix resume {MATRIX_ID}",
        f"matrix id: {MATRIX_ID}"]
    if fmt == "json":
        assert json.loads(said.out)["matrix_id"] == MATRIX_ID


def test_status_names_an_unfinished_runs_repeat_as_the_progress_lines_do(db_path) -> None:
    result = CliRunner().invoke(app, ["matrix", "status", UNFINISHED_ID, "--db", str(db_path)])
    assert result.exit_code == 0, result.output
    assert "  interrupted left-000002/ script copy graded rep 1: host h1 went away" \
        in result.stdout.splitlines()  # it read "graded #1"


def test_counts_read_in_the_singular_for_one() -> None:
    # "6 runs on 1 targets", "(and 1 more problems)".
    def runs(*targets) -> list[SimpleNamespace]:
        return [SimpleNamespace(target=t) for t in targets]

    assert planned_line("m-1", runs(H1)) == "matrix m-1: 1 run on 1 target"
    assert planned_line("m-1", runs(H1, H1, H2)) == "matrix m-1: 3 runs on 2 targets"
    with pytest.raises(UserError, match=r"^first \(and 1 more problem\)$"):
        refuse_unrunnable_models(["first", "second"])
    with pytest.raises(UserError, match=r"^first \(and 2 more problems\)$"):
        refuse_unrunnable_models(["first", "second", "third"])


def test_show_of_a_matrix_not_all_done_says_its_tables_read_the_done_runs_only(
        db_path) -> None:
    # `matrix show` of a failed, interrupted or running matrix printed its tables and said
    # nothing of the runs missing from them.
    def show(matrix_id: str):
        return CliRunner().invoke(app, ["matrix", "show", matrix_id, "--db", str(db_path)])

    left = show(UNFINISHED_ID)
    assert left.exit_code == 0, left.output
    assert left.stderr == (f"matrix {UNFINISHED_ID}: interrupted; the tables read only its "
                           f"done runs, 0 of 1 (1 interrupted; `specfleet matrix status "
                           f"{UNFINISHED_ID}` says more)\n")
    done = show(MATRIX_ID)
    assert done.exit_code == 0 and done.stderr == ""


def test_a_pivot_never_puts_two_token_limits_side_by_side(tmp_path) -> None:
    # A prompt of `max_tokens: {torch: 32, mlx: 20}` (the demo's story) showed MLX at 20
    # tokens beside torch at 32 in one row, as if comparable: tok/s depends on the length.
    worker = HostWorker("h1", sample_period_s=3600.0, quiet_threshold_per_core=1e9)
    with open_store(str(tmp_path / "s.db")) as store:
        try:
            seed_matrix(store, worker, "limits", [
                Seed(H1, "script", "copy", "plain", tuple(PLAIN_RATES)),
                Seed(H1, "script", "copy", "graded", (150.0, 152.0, 148.0)),
                Seed(H2, "script", "copy", "plain", tuple(PLAIN_RATES), max_tokens=24),
                Seed(H2, "script", "copy", "graded", (120.0, 121.0, 119.0), max_tokens=24)],
                "limits-000003")
        finally:
            worker.close()
        rows = json.loads(render_matrix(store, "limits-000003", "json", "target"))["rows"]
        table = render_matrix(store, "limits-000003", "markdown", "target")
    assert [(r["max_tokens"], sorted(r["targets"])) for r in rows] == [
        (16, ["h1/toy/cpu"]), (24, ["h2/toy/cpu"])]
    assert rows[0]["targets"]["h1/toy/cpu"]["speedup"] == pytest.approx(1.5)
    assert rows[1]["targets"]["h2/toy/cpu"]["speedup"] == pytest.approx(1.2)
    assert "| script | copy | graded | 16 |" in table and "| script | copy | graded | 24 |" in table


def two_session_store(url: str, matrix_id: str) -> None:
    """A matrix of two runs, one timed by a driver cut short, the other by the resume after
    it: each run keeps the driver that timed it."""
    runs = [run.model_copy(update={"matrix_id": matrix_id}) for run in grid(repeats=1)]
    hour = timedelta(hours=1)
    with open_store(url) as store:
        store.create_matrix("mixed", {"name": "mixed"}, runs, matrix_id=matrix_id)
        for driver, run, later in (("box:1:aaaa", runs[0], 0 * hour),
                                   ("box:2:bbbb", runs[1], hour)):
            store.claim_matrix(matrix_id, driver, lease_s=0.001, requeue=True)
            store.mark_running(run.run_key, driver, lease_s=0.001)
            timed = result(run)
            store.record_result(timed.model_copy(update={
                "started_at": timed.started_at + later, "finished_at": timed.finished_at + later}))
        store.finish_matrix(matrix_id, "done")


def test_show_says_its_cells_mix_runs_of_two_sessions(tmp_path) -> None:
    # A matrix cut short and resumed read as one session: nothing said its cells mix runs
    # timed an hour apart.
    url = f"sqlite:///{tmp_path / 's.db'}"
    two_session_store(url, "mixed-1")
    shown = CliRunner().invoke(app, ["matrix", "show", "mixed-1", "--db", url, "-o", "json"])
    assert shown.exit_code == 0, shown.output
    assert shown.stderr == (
        "matrix mixed-1: its cells mix runs timed in 2 sessions (1 run 2026-11-01 "
        "12:00:00–12:00:01 UTC, 1 run 2026-11-01 13:00:00–13:00:01 UTC); the host's load "
        "and conditions may differ between them\n")
    assert json.loads(shown.stdout)["matrix_id"] == "mixed-1"  # stdout: the tables alone


def test_the_record_says_its_cells_mix_runs_of_two_sessions(tmp_path) -> None:
    # Its host conditions read "before the first run, after the last" across both sessions,
    # and nothing in the record said an hour and a driver lay between them.
    url = f"sqlite:///{tmp_path / 's.db'}"
    two_session_store(url, "mixed-2")
    with open_store(url, read_only=True) as store:
        text = record_markdown(store, "mixed-2", [])
    conditions = text.split("Host conditions", 1)[1]
    assert ("matrix mixed-2: its cells mix runs timed in 2 sessions (1 run 2026-11-01 "
            "12:00:00–12:00:01 UTC, 1 run 2026-11-01 13:00:00–13:00:01 UTC)") in conditions


def test_resume_refuses_a_model_folder_gone_before_the_fleet_starts(tmp_path,
                                                                    monkeypatch) -> None:
    # The embedded fleet started (a minute on a busy box), sent each run to fail on the
    # missing folder and stored them failed; the matrix read failed.
    monkeypatch.setenv("SPECFLEET_HOST", "h1")
    url = f"sqlite:///{tmp_path / 's.db'}"
    gone = tmp_path / "model"
    left = RunSpec(run_key="gone-1/r", matrix_id="gone-1",
                   target=Target(host="h1", engine="torch", device="cpu"), model=str(gone),
                   prompt_name="p", prompt_text="hello hello", arm="plain", max_tokens=8)
    with open_store(url) as store:
        store.create_matrix("gone", {"name": "gone"}, [left], matrix_id="gone-1")
        store.mark_interrupted(left.run_key, "driver stopped")
        store.finish_matrix("gone-1", "interrupted")
    refused = CliRunner().invoke(app, ["matrix", "resume", "gone-1", "--embedded", "--db", url])
    assert refused.exit_code == 2, refused.output
    assert refused.stderr.startswith(f"error: matrix gone-1: torch: model '{gone}' is neither ")
    assert refused.stderr.endswith("; its runs not done are left as they are: expected the model "
                                   "back, then `specfleet matrix resume gone-1`\n")
    assert refused.stderr.count("\n") == 1
    with open_store(url, read_only=True) as store:
        assert [r.status for r in store.runs(matrix="gone-1")] == ["interrupted"]
        assert store.get_matrix("gone-1").status == "interrupted"


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_with_no_done_run_json_and_csv_are_still_a_document(db_path, capsys, fmt):
    # `bench -o json | jq` got empty input when every run failed; `matrix show` printed the
    # empty document. A table says nothing on stdout: its failure lines are on stderr.
    from specfleet.cli.matrix_output import echo_tables

    with open_store(str(db_path)) as store:
        echo_tables(store, UNFINISHED_ID, fmt, "whole")
    out = capsys.readouterr().out
    if fmt == "json":
        assert json.loads(out)["cells"] == []
    elif fmt == "csv":
        assert out.startswith("target,model,prompt,arm,") and len(out.splitlines()) == 1
    else:
        assert out == ""
