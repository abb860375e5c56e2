"""Evidence or failure: `parity` and `compare` fail when a planned pair or cell was not
compared (a failed arm, runs never done, two matrices with nothing in common, a baseline
without the pairs), and say how many were ("0 of 1 pairs compared") and why they fail."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.run import Target
from specfleet.store.store import open_store
from tests.report.conftest import DEMO_ID, MIXED_ID, db_path, worker  # noqa: F401
from tests.report.seed import H1, H2, PROMPTS, Seed, seed_matrix

runner = CliRunner()
FAILED_ARM_ID = "failedarm-000011"
NOTHING_DONE_ID = "nothing-000012"
OTHER_ID = "other-000013"
ALL_DONE_ID = "alldone-000014"
RENAMED_ID = "renamed-000015"
COPY_ONLY_ID = "copyonly-000016"
# This machine under `fleet up --name head1`: the embedded fleet called it h1.
HEAD1 = Target(host="head1", engine="toy", device="cpu")


def _done_cells(target: Target, prompts=("copy", "echo")) -> list[Seed]:
    return [Seed(target, "script", prompt, arm, (100.0 if arm == "plain" else 150.0,))
            for prompt in prompts for arm in ("plain", "graded")]


@pytest.fixture(scope="module")
def evidence_db(db_path, worker):  # noqa: F811
    """The report store plus a matrix whose graded arm failed, the same matrix all done, one
    never run, one on a target no other matrix has, the all-done one on a renamed host, and
    its copy prompt alone."""
    with open_store(str(db_path)) as store:
        seed_matrix(store, worker, "failedarm", [
            Seed(H1, "script", "copy", "plain", (100.0,)),
            Seed(H1, "script", "copy", "graded", (150.0,)),
            Seed(H1, "script", "echo", "plain", (100.0,)),
            Seed(H1, "script", "echo", "graded", (150.0,)),
        ], FAILED_ARM_ID)
        key = f"{FAILED_ARM_ID}/{H1.label}/script/echo/graded/0"
        _fail_run(store, key)
        seed_matrix(store, worker, "alldone", _done_cells(H1), ALL_DONE_ID)
        seed_matrix(store, worker, "renamed", _done_cells(HEAD1), RENAMED_ID)
        seed_matrix(store, worker, "copyonly", _done_cells(H1, ("copy",)), COPY_ONLY_ID)
        _plan_only(store, NOTHING_DONE_ID)
        seed_matrix(store, worker, "other", [Seed(H2, "induction", "copy", "plain", (9.0,))],
                    OTHER_ID)
    return db_path


def _fail_run(store, run_key: str) -> None:
    # A done run is never overwritten; the store's own row is edited to model a failed arm.
    from sqlalchemy import update

    from specfleet.store.tables import Run

    with store.engine.begin() as conn:
        conn.execute(update(Run).where(Run.run_key == run_key)
                     .values(status="failed", error="toy failure", tok_per_s=None))


def _plan_only(store, matrix_id: str) -> None:
    from specfleet.jobs.run import RunSpec

    specs = [RunSpec(run_key=f"{matrix_id}/{arm}", matrix_id=matrix_id, target=H1,
                     model="script", prompt_name="copy", prompt_text=PROMPTS["copy"], arm=arm,
                     max_tokens=8) for arm in ("plain", "graded")]
    store.create_matrix("nothing", {"name": "nothing"}, specs, matrix_id=matrix_id)
    store.finish_matrix(matrix_id, "interrupted")


def invoke(db, *args: str):
    return runner.invoke(app, [*args, "--db", str(db)])


def test_parity_with_a_failed_arm_fails_and_counts(evidence_db) -> None:
    result = invoke(evidence_db, "parity", FAILED_ARM_ID)
    assert result.exit_code == 1, result.output
    assert "1 identical" in result.stdout and "0 suspect" in result.stdout
    assert "1 of 2 pairs compared" in result.stdout
    assert "parity: 1 of 2 pairs compared" in result.stderr


def test_parity_with_no_run_done_fails(evidence_db) -> None:
    result = invoke(evidence_db, "parity", NOTHING_DONE_ID, "--format", "json")
    assert result.exit_code == 1, result.output
    assert "0 of 1 pairs compared" in result.stderr


def test_parity_of_a_complete_matrix_passes_with_its_count(evidence_db) -> None:
    result = invoke(evidence_db, "parity", MIXED_ID)
    assert result.exit_code == 0, result.output
    assert "1 of 1 pairs compared" in result.stdout


def test_compare_with_no_common_cell_fails(evidence_db) -> None:
    result = invoke(evidence_db, "compare", DEMO_ID, OTHER_ID)
    assert result.exit_code == 1, result.output
    assert "0 regressions in 0 cells" in result.stdout
    assert result.stderr.splitlines()[-1] == (
        "compare: 0 of 15 cells compared; exit 1: a cell measured on one side only is no "
        f"evidence (1 not measured in {DEMO_ID}, 14 not in {OTHER_ID})")


def test_compare_with_a_failed_cell_fails_and_says_why(evidence_db) -> None:
    result = invoke(evidence_db, "compare", ALL_DONE_ID, FAILED_ARM_ID)
    assert result.exit_code == 1, result.output
    assert "0 regressions in 3 cells measured in both." in result.stdout
    assert result.stderr.splitlines()[-1] == (
        "compare: 3 of 4 cells compared; exit 1: a cell measured on one side only is no "
        f"evidence (0 not measured in {ALL_DONE_ID}, 1 not in {FAILED_ARM_ID})")


def test_compare_only_changed_counts_every_cell_measured_in_both(evidence_db) -> None:
    # The filter hides rows; it said "0 regressions in 0 cells" of 3 cells compared.
    result = invoke(evidence_db, "compare", ALL_DONE_ID, FAILED_ARM_ID, "--only-changed",
                    "--factor", "1.1")
    assert result.exit_code == 1, result.output
    assert "0 regressions in 3 cells measured in both; showing the 0 that changed." in result.stdout


def test_parity_against_a_baseline_on_other_target_names_fails(evidence_db) -> None:
    # The walkthrough's trap: every pair compared, none of them in the baseline, exit 0.
    result = invoke(evidence_db, "parity", RENAMED_ID, "--baseline", ALL_DONE_ID)
    assert result.exit_code == 1, result.output
    assert (f"0 regressions against {ALL_DONE_ID} (0 of 2 pairs found in the baseline); "
            "2 of 2 pairs compared") in result.stdout
    assert result.stderr == (
        f"parity: 0 of 2 pairs found in the baseline {ALL_DONE_ID}; exit 1: a pair missing "
        "from the baseline is no evidence (the baseline has no done run on head1/toy/cpu, "
        "only on h1/toy/cpu)\n")


def test_parity_baseline_coverage_is_in_the_json(evidence_db) -> None:
    result = invoke(evidence_db, "parity", RENAMED_ID, "--baseline", ALL_DONE_ID,
                    "--format", "json")
    assert result.exit_code == 1, result.output
    body = json.loads(result.stdout)
    assert body["coverage"] == {"compared": 2, "planned": 2, "unit": "pairs"}
    assert body["baseline_coverage"] == {"compared": 0, "planned": 2, "unit": "pairs"}
    assert body["baseline_missing"] == [["head1/toy/cpu", "script", "copy", "graded"],
                                        ["head1/toy/cpu", "script", "echo", "graded"]]
    assert "(0 of 2 pairs found in the baseline)" in body["summary"]


def test_parity_against_a_baseline_lacking_a_cell_names_it(evidence_db) -> None:
    result = invoke(evidence_db, "parity", ALL_DONE_ID, "--baseline", COPY_ONLY_ID,
                    "--format", "markdown")
    assert result.exit_code == 1, result.output
    assert "(1 of 2 pairs found in the baseline)" in result.stdout
    assert result.stderr.endswith(
        "a pair missing from the baseline is no evidence (it has no pair to compare h1/toy/cpu "
        "script echo graded with)\n")


def test_parity_against_a_baseline_with_every_pair_passes(evidence_db) -> None:
    result = invoke(evidence_db, "parity", COPY_ONLY_ID, "--baseline", ALL_DONE_ID)
    assert result.exit_code == 0, result.output
    assert "(1 of 1 pairs found in the baseline)" in result.stdout and result.stderr == ""


def test_compare_of_a_matrix_with_itself_is_refused(evidence_db) -> None:
    # Every ratio was 1.0 and it exited 0: a mistyped id read as a check that passed.
    result = invoke(evidence_db, "compare", ALL_DONE_ID, ALL_DONE_ID)
    assert result.exit_code == 2, result.output
    assert result.stderr == (f"error: A and B are both '{ALL_DONE_ID}'; expected two "
                             "different matrix ids (the baseline, then the matrix to check "
                             "against it)\n")
    assert result.stdout == ""


def test_resume_of_a_matrix_whose_runs_are_all_done_says_so_without_a_fleet(evidence_db) -> None:
    # No --address and no fleet here: had it gone on, it would have tried to find one.
    done = invoke(evidence_db, "matrix", "resume", OTHER_ID)
    assert done.exit_code == 0, done.output
    # A status, not a table: stderr, as every other status line of a run.
    assert done.stderr == f"matrix {OTHER_ID}: its one run is done; nothing to resume\n"
    assert done.stdout == ""
    failed = invoke(evidence_db, "matrix", "resume", FAILED_ARM_ID, "--address", "127.0.0.1:9")
    assert failed.exit_code == 2 and "nothing to resume" not in failed.output  # it goes on
