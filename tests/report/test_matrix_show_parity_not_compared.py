"""`matrix show`'s parity line on arms with no verdict: a matrix sampled without a seed read
"0 identical, 0 diverged" and nothing more, where `parity` says each pair was not compared
because each run draws anew."""

from __future__ import annotations

from pathlib import Path

from specfleet.report.results import render_matrix
from specfleet.store import open_store
from tests.store.factory import grid, result

UNSEEDED = ("sampled at temperature 0.7 without a seed: each run draws anew (`specfleet "
            "parity run FILE` checks greedy parity)")


def _store(tmp_path: Path, prompts=("edit_fn",), failed_plain: str | None = None):
    """A done matrix of plain and graded sampled at 0.7 without a seed, 3 repeats; the plain
    runs of `failed_plain` failed."""
    store = open_store(f"sqlite:///{tmp_path}/s.db")
    runs = [run.model_copy(update={"temperature": 0.7, "seed": None})
            for run in grid(repeats=3, prompts=prompts, prefix="samp")]
    store.create_matrix("samp", {"name": "samp"}, runs, matrix_id="samp-000001")
    for i, run in enumerate(runs):
        failed = run.prompt_name == failed_plain and run.arm == "plain"
        store.record_result(result(run, 10.0 + i, text=f"out {i}",
                                   status="failed" if failed else "done"))
    store.finish_matrix("samp-000001", "done")
    return store


def _parity_line(text: str) -> str:
    (line,) = [line for line in text.splitlines() if line.startswith("Parity vs plain")]
    return line


def test_an_unseeded_pair_is_said_not_compared_and_why(tmp_path: Path) -> None:
    store = _store(tmp_path)
    try:
        for fmt in ("table", "markdown"):
            text = render_matrix(store, "samp-000001", fmt)
            assert _parity_line(text) == (
                "Parity vs plain (every repetition, 0 replies compared): 0 identical, "
                f"0 diverged; 1 not compared: {UNSEEDED}.")
        counters = render_matrix(store, "samp-000001").split("Counters (first repetition)")[1]
        graded = [line for line in counters.splitlines() if " graded " in line]
        assert len(graded) == 1 and " not compared " in graded[0]  # its "vs plain" column
    finally:
        store.close()


def test_reasons_that_differ_point_at_parity(tmp_path: Path) -> None:
    # story's plain failed (its graded has no plain), edit_fn's pair drew anew.
    store = _store(tmp_path, prompts=("edit_fn", "story"), failed_plain="story")
    try:
        assert _parity_line(render_matrix(store, "samp-000001")) == (
            "Parity vs plain (every repetition, 0 replies compared): 0 identical, 0 diverged; "
            "2 not compared "
            "(`specfleet parity samp-000001` says why).")
    finally:
        store.close()
