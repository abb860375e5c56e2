"""Bad input to the commands that read stored results (`results`, `history`, `compare`,
`report`, `replay`): each mistake one `error:` line, exit 2, the store left as it was."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.errors import UserError
from specfleet.report.history import cell_history
from specfleet.store import open_store
from tests.store.factory import HOST_A, result, spec

MATRIX_ID = "m-000001"
PENDING_ID = "pending-000002"
EMPTY_ID = "empty-000003"
JOB_ID = "gen-j-000004"


@pytest.fixture(scope="module")
def db_path(tmp_path_factory) -> Path:
    """A matrix of done plain and graded runs, a matrix never run, an empty matrix, a job."""
    path = tmp_path_factory.mktemp("store") / "specfleet.db"
    done = [spec(f"{MATRIX_ID}/{arm}/{r}", arm, repeat=r, matrix_id=MATRIX_ID)
            for r in range(3) for arm in ("plain", "graded")]
    with open_store(str(path)) as store:
        store.create_matrix("m", {}, done, matrix_id=MATRIX_ID)
        for run in done:
            store.record_result(result(run))
        store.create_matrix("pending", {}, [spec(f"{PENDING_ID}/plain", matrix_id=PENDING_ID)],
                            matrix_id=PENDING_ID)
        store.create_matrix("empty", {}, [], matrix_id=EMPTY_ID)
        job_runs = [spec(f"{JOB_ID}/{i}", arm).model_copy(update={"job_id": JOB_ID})
                    for i, arm in enumerate(("plain", "calibrated"))]
        store.create_generation_job("j", HOST_A, "m1", job_runs, job_id=JOB_ID)
        store.record_result(result(job_runs[1]))  # a cell no matrix measured
    return path


def invoke(db_path: Path, *args: str):
    before = hashlib.sha256(db_path.read_bytes()).hexdigest()
    outcome = CliRunner().invoke(app, [*args, "--db", str(db_path)])
    assert hashlib.sha256(db_path.read_bytes()).hexdigest() == before  # reads never write
    return outcome


def assert_refused(outcome, *fragments: str) -> None:
    assert outcome.exit_code == 2, (outcome.output, outcome.exception)
    lines = outcome.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), outcome.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_results_refuses_a_typo_beside_a_stored_value(db_path) -> None:
    # It showed m1's runs and dropped 'M1' without a word (checked only when nothing matched).
    assert_refused(invoke(db_path, "results", "--model", "m1", "--model", "M1"),
                   "--model: no stored run has 'M1'", "stored values: m1")
    assert_refused(invoke(db_path, "results", "--host", HOST_A.host, "--host", "nohost"),
                   "--host: no stored run has 'nohost'")


@pytest.mark.parametrize(("flags", "said"), [
    (["--model", "M1", "--prompt", "edit_fn"], "--model: no stored run has 'M1'"),
    (["--model", "m1", "--prompt", "edit-fn"], "--prompt: no stored run has 'edit-fn'"),
    (["--model", "m1", "--prompt", "edit_fn", "--target", "nohost/mlx"],
     "--target HOST: no stored run has 'nohost'"),
])
def test_history_names_the_filter_no_stored_run_holds(db_path, flags, said) -> None:
    # It said "no done runs of model ..., prompt ..., arm ...", not which one is not stored.
    assert_refused(invoke(db_path, "history", *flags, "--arm", "graded"), said,
                   "expected one of the stored values")


def test_history_of_a_cell_only_a_generation_job_ran_says_so(db_path) -> None:
    # It said "no done runs of model 'm1', ...", where `results` showed the job's done run.
    assert_refused(invoke(db_path, "history", "--model", "m1", "--prompt", "edit_fn", "--arm",
                          "calibrated"),
                   "no matrix measured model 'm1', prompt 'edit_fn', arm 'calibrated': its 1 "
                   "done run(s) belong to generation jobs, which history does not follow "
                   "(`specfleet results --model m1 --prompt edit_fn --arm calibrated` shows "
                   "them); expected a cell some matrix measured")
    with open_store(str(db_path), read_only=True) as store, pytest.raises(  # the web view's
            UserError, match="^no matrix measured model 'm1', prompt 'edit_fn', arm "  # ?last=
                             "'calibrated': its 1 done"):
        cell_history(store, "m1", "edit_fn", "calibrated", last=3)
    assert_refused(invoke(db_path, "history", "--model", "m1", "--prompt", "edit_fn", "--arm",
                          "gated"),
                   "no done runs of model 'm1', prompt 'edit_fn', arm 'gated'; expected a cell "
                   "some matrix measured")


def test_a_generation_job_id_where_a_matrix_id_is_expected_is_named(db_path) -> None:
    # "expected an id that `specfleet matrix list` shows": the id was stored, of another kind.
    for args in (["compare", MATRIX_ID, JOB_ID], ["results", "--matrix", JOB_ID]):
        assert_refused(invoke(db_path, *args), f"no matrix '{JOB_ID}'",
                       "expected a matrix id, not a generation job's")
    assert_refused(invoke(db_path, "job", "show", MATRIX_ID),
                   "expected a generation job id, not a matrix's")


def test_results_refuses_a_matrix_and_a_job_together(db_path) -> None:
    # The filters are ANDed and a run is in one or the other: it printed "0 runs", exit 0.
    assert_refused(invoke(db_path, "results", "--matrix", MATRIX_ID, "--job", JOB_ID),
                   "--matrix and --job: a run belongs to a matrix or to a generation job, "
                   "never both; expected one of them")


def test_replay_of_a_stored_matrix_without_runs_says_so(db_path) -> None:
    # It said "no matrix, generation job or run" of a matrix `matrix list` shows.
    assert_refused(invoke(db_path, "replay", EMPTY_ID),
                   f"RUN_OR_MATRIX {EMPTY_ID}: the matrix holds no runs")


def test_replay_of_runs_not_done_does_not_blame_their_age(db_path) -> None:
    # It said "no done greedy run keeps its prompt token ids (runs stored before specfleet
    # replay existed)" of a matrix whose one run had not run at all.
    assert_refused(invoke(db_path, "replay", PENDING_ID),
                   f"RUN_OR_MATRIX {PENDING_ID}: no done greedy run to replay (its runs: "
                   "1 pending)")


def test_a_record_of_a_matrix_without_done_runs_says_its_tables_are_empty(db_path, tmp_path):
    # It wrote a record of empty tables with exit 0 and not a word.
    outcome = invoke(db_path, "report", PENDING_ID, "--out", str(tmp_path / "rec"))
    assert outcome.exit_code == 0, outcome.output
    assert outcome.stderr == (f"warning: matrix {PENDING_ID} has no done runs: the record's "
                              "tables are empty; runs.csv holds each run's status and error\n")
    assert (tmp_path / "rec" / "runs.csv").exists()
    done = invoke(db_path, "report", MATRIX_ID, "--out", str(tmp_path / "done"))
    assert done.exit_code == 0 and done.stderr == ""
