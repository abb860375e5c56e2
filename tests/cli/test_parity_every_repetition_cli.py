"""`specfleet parity` exits 1 for what only a later repetition shows: an arm's repeat that
leaves plain's reply, a plain whose own repeats differ (it exited 0, "15 identical")."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.store import open_store
from tests.report.seed import repeats_matrix

runner = CliRunner()
CLEAN, LATER, PLAIN_TWO_WAYS = "clean-000001", "later-000002", "plain-000003"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('reps') / 's.db'}"
    with open_store(url) as store:
        repeats_matrix(store, CLEAN, {})
        repeats_matrix(store, LATER, {("story", "graded", 1): [5, 6, 9]})
        repeats_matrix(store, PLAIN_TWO_WAYS, {("story", "plain", 1): [5, 6, 8]})
    return url


def invoke(db: str, *args: str):
    return runner.invoke(app, [*args, "--db", db])


def test_a_later_repeat_that_diverges_fails_and_names_its_repeat(db) -> None:
    assert invoke(db, "parity", CLEAN, "--no-replay").exit_code == 0
    result = invoke(db, "parity", LATER, "--no-replay")
    assert result.exit_code == 1, result.output
    assert "token 2 (char 2) in repeat 1" in result.stdout
    assert "1 divergence from plain not replayed" in result.stderr


def test_a_plain_whose_repeats_differ_fails_however_unverified_is_allowed(db) -> None:
    result = invoke(db, "parity", PLAIN_TWO_WAYS, "--no-replay", "--allow-unverified")
    assert result.exit_code == 1, result.output
    assert ("plain repeats differ at token 2 (char 2) in repeat 1 on mac1/mlx/metal m1 story "
            "(greedy plain decoding is not deterministic there; fails)") in result.stdout
    assert "plain repeats differ at token 2 (char 2) in repeat 1 on mac1/mlx/metal m1 story " \
        "(greedy plain decoding is not deterministic on that target)" in result.stderr


def test_matrix_show_counts_every_reply(db) -> None:
    result = invoke(db, "matrix", "show", LATER)
    assert result.exit_code == 0, result.output
    assert ("Parity vs plain (every repetition, 24 replies compared): 5 identical, 1 diverged"
            in result.stdout)
    assert "diverges at token 2 (char 2) in repeat 1" in result.stdout
