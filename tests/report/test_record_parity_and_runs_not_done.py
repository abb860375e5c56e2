"""The record says of parity and of runs not done what `specfleet parity` and `matrix show`
say: a peer's differing reply is `peer differs`, a pair left uncompared (a failed run, a
reply sampled without a seed) is named with why and counted, and a failed or interrupted run
is listed with its status and error rather than left out unsaid."""

from __future__ import annotations

import pytest

from specfleet.report.record import record_markdown
from specfleet.store import open_store
from tests.store.factory import HOST_B, grid, result

MATRIX = "part-000001"
SAMPLED = "sampled-000002"


def _record(store, matrix_id: str, runs, update) -> None:
    store.create_matrix(matrix_id.split("-")[0], {"name": matrix_id.split("-")[0]}, runs,
                        matrix_id=matrix_id)
    for run in runs:
        store.record_result(update(run, result(run, 10.0 if run.arm == "plain" else 15.0)))
    store.finish_matrix(matrix_id, "failed")


def _partial(run, done):
    """edit_fn's graded repeat 0 failed, its plain repeat 2 interrupted; hf-lookup replies
    otherwise than plain on story; `fixed` failed on story."""
    if run.prompt_name == "edit_fn" and run.arm == "graded" and run.repeat == 0:
        return done.model_copy(update={"status": "failed", "error": "boom: out of memory\nmore"})
    if run.prompt_name == "edit_fn" and run.arm == "plain" and run.repeat == 2:
        return done.model_copy(update={"status": "interrupted", "error": "host unreachable"})
    if run.prompt_name == "story" and run.arm == "fixed":
        return done.model_copy(update={"status": "failed", "error": "fixed broke"})
    if run.prompt_name == "story" and run.arm == "hf-lookup":
        return done.model_copy(update={"token_ids": [5, 9, 7], "output_text": "other"})
    return done


@pytest.fixture()
def store(tmp_path):
    with open_store(f"sqlite:///{tmp_path / 's.db'}") as store:
        runs = grid(arms=("plain", "graded", "hf-lookup", "fixed"), repeats=3,
                    targets=(HOST_B,), prompts=("edit_fn", "story"), prefix=MATRIX)
        _record(store, MATRIX, runs, _partial)
        sampled = [r.model_copy(update={"temperature": 0.8, "seed": None})
                   for r in grid(repeats=3, targets=(HOST_B,), prefix=SAMPLED)]
        _record(store, SAMPLED, sampled, lambda run, done: done)
        yield store


def _section(text: str, heading: str, end: str) -> str:
    return text.split(heading, 1)[1].split(end, 1)[0]


def test_a_peer_that_differs_reads_peer_differs_and_the_pairs_are_counted(store) -> None:
    parity = _section(record_markdown(store, MATRIX, []), "## Parity against plain", "## Load")
    where = "spark1/torch/cuda | m1 | story"
    assert f"| {where} | hf-lookup | peer differs at token 1 (char 1) in repeat 0 |" in parity
    assert f"| {where} | graded | identical |" in parity
    # `specfleet parity`'s own summary line: the same counts, and how many pairs it compared
    assert ("Parity of part-000001 (every repetition, 19 replies compared): 4 identical, "
            "0 near-tie, 0 suspect, 0 unverified, 1 peer differs (a peer arm; passes); 5 of 6 "
            "pairs compared") in parity
    assert f"| {where} | fixed | fixed failed: fixed broke |" in parity


def test_a_pair_sampled_without_a_seed_is_named_not_an_empty_table(store) -> None:
    parity = _section(record_markdown(store, SAMPLED, []), "## Parity against plain", "## Load")
    assert "0 of 1 pairs compared" in parity
    assert "| spark1/torch/cuda | m1 | edit_fn | graded | sampled at temperature 0.8" in parity


def test_failed_and_interrupted_runs_are_listed_with_status_and_error(store) -> None:
    text = record_markdown(store, MATRIX, [])
    left = _section(text, "## Runs not done", "## Raw per-run data")
    assert "| spark1/torch/cuda | m1 | edit_fn | graded | 0 | failed | boom: out of memory |" in left
    assert "| spark1/torch/cuda | m1 | edit_fn | plain | 2 | interrupted | host unreachable |" in left
    assert left.count("| spark1/torch/cuda |") == 5  # 3 of fixed on story, and the two above
    everything = record_markdown(store, SAMPLED, [])
    assert "## Runs not done" not in everything  # every run done: no such section

