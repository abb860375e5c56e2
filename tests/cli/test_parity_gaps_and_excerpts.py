"""What `specfleet parity` says of pairs it could not compare (a side failed, was
interrupted or never ran), of a matrix with only plain, of a divergence it was told not to
replay, and the reply text at a divergence: each line true to the stored runs."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store.store import open_store
from tests.report.conftest import DEMO_ID, db_path, worker  # noqa: F401
from tests.report.seed import H1, Seed, seed_matrix

runner = CliRunner()
GAPS_ID = "gaps-000001"
PLAIN_ONLY_ID = "plainonly-000002"


@pytest.fixture(scope="module")
def gaps_db(tmp_path_factory, worker):  # noqa: F811
    """copy: plain, graded, gated (gated failed); echo: plain (interrupted), graded."""
    path = tmp_path_factory.mktemp("gaps") / "specfleet.db"
    store = open_store(str(path))
    seeds = [Seed(H1, "script", prompt, arm, (100.0,))
             for prompt, arms in (("copy", ("plain", "graded", "gated")),
                                  ("echo", ("plain", "graded")))
             for arm in arms]
    seed_matrix(store, worker, "gaps", seeds, GAPS_ID)
    seed_matrix(store, worker, "plainonly", [Seed(H1, "script", "copy", "plain", (100.0,))],
                PLAIN_ONLY_ID)
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET status = 'failed', error = 'RuntimeError: out of memory\n"
                   "at layer 3' WHERE matrix_id = ? AND prompt_name = 'copy' AND arm = 'gated'",
                   (GAPS_ID,))
        db.execute("UPDATE runs SET status = 'interrupted' WHERE matrix_id = ? AND "
                   "prompt_name = 'echo' AND arm = 'plain'", (GAPS_ID,))
    return path


def invoke(path, *args: str):
    return runner.invoke(app, ["parity", *args, "--no-replay", "--db", str(path)])


def test_pairs_not_compared_are_named_with_their_runs_status(gaps_db) -> None:
    result = invoke(gaps_db, GAPS_ID)
    assert result.exit_code == 1, result.output
    assert "1 of 3 pairs compared" in result.stdout
    assert "Pairs not compared" in result.stdout
    assert "gated    gated failed: RuntimeError: out of memory" in result.stdout
    assert "graded   plain interrupted" in result.stdout
    assert result.stderr.strip() == (
        "parity: 1 of 3 pairs compared; exit 1: a pair not compared is no "
        "evidence (h1/toy/cpu script copy gated: gated failed: RuntimeError: out of memory; "
        "and 1 more)")


def test_pairs_not_compared_in_json_and_csv(gaps_db) -> None:
    body = json.loads(invoke(gaps_db, GAPS_ID, "-o", "json").stdout)
    assert [(u["prompt"], u["arm"], u["why"]) for u in body["uncompared"]] == [
        ("copy", "gated", "gated failed: RuntimeError: out of memory"),
        ("echo", "graded", "plain interrupted")]
    rows = list(csv.DictReader(io.StringIO(invoke(gaps_db, GAPS_ID, "-o", "csv").stdout)))
    assert [(r["arm"], r["verdict"], r["why"]) for r in rows] == [
        ("graded", "identical", ""),
        ("gated", "not compared", "gated failed: RuntimeError: out of memory"),
        ("graded", "not compared", "plain interrupted")]


def test_a_matrix_of_plain_alone_says_there_is_nothing_to_compare(gaps_db) -> None:
    result = invoke(gaps_db, PLAIN_ONLY_ID)
    assert result.exit_code == 1, result.output
    assert result.stderr.strip() == (
        f"parity: {PLAIN_ONLY_ID} planned no arm besides plain: no pair to compare; exit 1: "
        "a check that compares nothing is no pass")


def test_no_replay_says_so_and_shows_the_text_at_the_divergence(db_path) -> None:  # noqa: F811
    result = invoke(db_path, DEMO_ID, "-o", "markdown")
    assert result.exit_code == 1, result.output
    row = next(line for line in result.stdout.splitlines() if "| unverified |" in line)
    assert ("| token 5 (char 5) in repeat 0 | after 'hello': plain ' world hell' vs graded "
            "'Zworld hell' |") in row
    assert "not replayed here (`specfleet parity ID` replays it on its target)" in row
    assert "no worker for this host" not in result.stdout


def test_parity_run_checks_its_models_before_the_fleet_starts(tmp_path):
    # It started the fleet and stored a matrix of failed runs (no tokenizer in the folder),
    # where `matrix run` refuses the same file in one line.
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"")
    spec = tmp_path / "p.yaml"
    spec.write_text(f"name: p\nmodels: ['{folder}']\nprompts: [{{name: p, text: hi}}]\n"
                    "arms: [plain, graded]\ntargets: {engines: [torch]}\n")
    db = tmp_path / "new.db"
    result = runner.invoke(app, ["parity", "run", str(spec), "--embedded", "--db", str(db),
                                 "--no-progress"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"error: {spec}: models[0]: torch: {folder} holds no tokenizer"), line
    assert not db.exists()
