"""`results --cells` / `--pivot target` over matrices run at different token limits, through
the real Typer app on a real SQLite store of real toy-engine runs."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.run import RunSpec
from specfleet.store.store import open_store
from tests.report.seed import H1, H2, PLAIN_RATES, PROMPTS
from tests.store import factory

SHORT_ID, LONG_ID = "short-000011", "long-000012"
# (matrix, max_tokens, target, arm) -> the repeats' tok/s: a 16-token reply amortises its
# prefill over more tokens than an 8-token one, so the same cell runs faster.
RATES = {
    (SHORT_ID, 8, H1, "plain"): (60.0, 61.0, 59.0),
    (SHORT_ID, 8, H1, "graded"): (66.0, 67.0, 65.0),  # 1.10x
    (LONG_ID, 16, H1, "plain"): tuple(PLAIN_RATES),
    (LONG_ID, 16, H1, "graded"): (150.0, 152.0, 148.0),  # 1.50x
    (LONG_ID, 16, H2, "plain"): tuple(PLAIN_RATES),
    (LONG_ID, 16, H2, "graded"): (120.0, 121.0, 119.0),  # 1.20x
}


@pytest.fixture(scope="module")
def limits_db(tmp_path_factory, worker):
    path = tmp_path_factory.mktemp("limits") / "specfleet.db"
    store = open_store(str(path))
    for matrix_id, max_tokens in ((SHORT_ID, 8), (LONG_ID, 16)):
        plan = [
            (RunSpec(run_key=f"{matrix_id}/{target.label}/{arm}/{repeat}", matrix_id=matrix_id,
                     target=target, model="script", prompt_name="copy",
                     prompt_text=PROMPTS["copy"], arm=arm, repeat=repeat,
                     max_tokens=max_tokens), rate)
            for (matrix, _, target, arm), rates in RATES.items() if matrix == matrix_id
            for repeat, rate in enumerate(rates)
        ]
        store.create_matrix(matrix_id, {"name": matrix_id}, [spec for spec, _ in plan],
                            matrix_id=matrix_id)
        for spec, rate in plan:
            store.record_result(worker.run(spec).model_copy(update={"tok_per_s": rate}))
        store.finish_matrix(matrix_id, "done")
    store.close()
    return path


def results(db, *args: str) -> str:
    result = CliRunner().invoke(app, ["results", "--matrix", SHORT_ID, "--matrix", LONG_ID,
                                      *args, "--db", str(db)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_cells_of_different_token_limits_are_never_pooled(limits_db) -> None:
    records = json.loads(results(limits_db, "--cells", "--format", "json"))
    got = [(r["target"], r["arm"], r["n"], r["median_tok_per_s"],
            r["speedup"] and round(r["speedup"], 3)) for r in records]
    # Pooled, h1 plain read a median of 80 tok/s over six runs and graded 1.34x: neither ran.
    assert got == [  # in plan order, plain first as in the tables
        ("h1/toy/cpu", "plain", 3, 60.0, None),
        ("h1/toy/cpu", "plain", 3, 100.0, None),
        ("h1/toy/cpu", "graded", 3, 66.0, 1.1),
        ("h1/toy/cpu", "graded", 3, 150.0, 1.5),
        ("h2/toy/cpu", "plain", 3, 100.0, None),
        ("h2/toy/cpu", "graded", 3, 120.0, 1.2),
    ]
    assert [r["max_tokens"] for r in records] == [8, 16, 8, 16, 16, 16]
    assert list(records[0])[:5] == ["target", "model", "prompt", "arm", "max_tokens"]


def test_every_cells_format_shows_the_token_limit(limits_db) -> None:
    rows = list(csv.DictReader(io.StringIO(results(limits_db, "--cells", "--format", "csv"))))
    assert [(r["arm"], r["max_tokens"], r["rates"]) for r in rows if r["target"] == "h1/toy/cpu"
            ] == [("plain", "8", "60;61;59"), ("plain", "16", "100;101;99"),
                  ("graded", "8", "66;67;65"), ("graded", "16", "150;152;148")]
    table = results(limits_db, "--cells")
    assert "6 cells (done runs)" in table and "max tok" in table.splitlines()[2]
    lines = [line.split() for line in table.splitlines() if line.startswith("  h1/toy/cpu")]
    assert [line[3:7] for line in lines] == [
        ["plain", "8", "3", "60.00"], ["plain", "16", "3", "100.00"],
        ["graded", "8", "3", "66.00"], ["graded", "16", "3", "150.00"]]
    assert "never pooled" in " ".join(table.split())
    markdown = results(limits_db, "--cells", "--format", "markdown")
    assert "| target | model | prompt | arm | max tok | n |" in markdown


def test_pivot_gives_each_token_limit_its_own_row(limits_db) -> None:
    body = json.loads(results(limits_db, "--pivot", "target", "--format", "json"))
    assert [(row["max_tokens"], {t: round(f["speedup"], 3) for t, f in row["targets"].items()})
            for row in body["rows"]] == [
        (8, {"h1/toy/cpu": 1.1}),  # h2 ran no 8-token run: never beside h1's 8
        (16, {"h1/toy/cpu": 1.5, "h2/toy/cpu": 1.2}),
    ]
    table = results(limits_db, "--pivot", "target")
    rows = [line.split()[:5] for line in table.splitlines() if line.startswith("  script")]
    # Plain's tok/s at each limit, and h2's column empty in the 8-token row.
    assert rows == [["script", "copy", "graded", "8", "60.0"],
                    ["script", "copy", "graded", "16", "100.0"]]
    assert [line.split()[-1] for line in table.splitlines() if line.startswith("  script")
            ] == ["–", "0.73"]
    flat = list(csv.DictReader(io.StringIO(results(limits_db, "--pivot", "target",
                                                   "--format", "csv"))))
    assert [(r["max_tokens"], r["h2/toy/cpu:speedup"]) for r in flat] == [("8", ""), ("16", "1.2")]


def test_a_cell_that_proposed_nothing_has_no_acceptance_rate(tmp_path) -> None:
    # `results --cells` said 0.0000 (the pivot `acc 0.00`) where each run's row says `–`.
    url = f"sqlite:///{tmp_path}/s.db"
    with open_store(url) as store:
        runs = [factory.spec(f"r{i}", arm, target=factory.HOST_B, repeat=i // 2)
                for i, arm in enumerate(["plain", "graded"] * 3)]
        matrix = store.create_matrix("quiet", {}, runs)
        for run in runs:
            store.record_result(factory.result(run, 10.0).model_copy(update={"proposed": 0,
                                                                      "accepted": 0}))
    read = ["results", "--db", url, "--matrix", matrix]
    cells = CliRunner().invoke(app, [*read, "--cells"]).stdout
    (graded,) = [line for line in cells.splitlines() if " graded " in line]
    assert graded.rstrip().endswith("–") and "0.0000" not in graded, graded
    pivot = CliRunner().invoke(app, [*read, "--pivot", "target"]).stdout
    assert "acc –" in pivot and "acc 0.00" not in pivot, pivot


def test_compare_says_what_else_differs_beside_a_faster_cell() -> None:
    # A cell run at a longer token limit read "faster" alone: tok/s grows with the reply.
    from types import SimpleNamespace

    from specfleet.report.history import compare_verdict_text

    def row(verdict: str, differs: tuple[str, ...]) -> SimpleNamespace:
        return SimpleNamespace(verdict=verdict, differs=differs)

    assert compare_verdict_text(row("faster", ("token limit",))) == (
        "faster; the cells differ in token limit")
    assert compare_verdict_text(row("faster", ())) == "faster"
    assert compare_verdict_text(row("slower", ("weights hash",))).startswith(
        "slower; not called a regression")


# Cells rich lays out as they are (wide CJK, combining marks, a right-aligned cell's trailing
# space) and cells it does not (a tab, an escape, a table past its console width).
GRID_CELLS = (("a", "b"), ("漢字x", "é"), ("e\u0301 z ", "7 "), (" lead", "😀"), ("", "–"),
              ("tab\there", "1"), ("esc\x1b[31m", "2"), ("x" * 390, "3"))


@pytest.mark.parametrize("cells", [GRID_CELLS[:5], GRID_CELLS[:6], GRID_CELLS[:5] +
                                   GRID_CELLS[6:7], GRID_CELLS[:5] + GRID_CELLS[7:], ()])
@pytest.mark.parametrize("left_cols", [0, 1, 2])
def test_the_one_pass_table_is_rich_text_to_the_byte(cells, left_cols) -> None:
    # A table of 12,000 runs took rich 30 s: `to_rich` lays it out in one pass, or asks rich.
    from specfleet.report.grid import Grid, _rich_text, to_rich

    grid = Grid(" 12 runs", ("matrix", "tok/s "), tuple(cells), ("a note", "漢 note "),
                left_cols=left_cols)
    for grids, heading in (([grid], ""), ([grid, grid], "Matrix m (n)")):
        assert to_rich(grids, heading) == _rich_text(grids, heading)


def test_a_printable_table_is_laid_out_without_rich() -> None:
    # The one-pass layout is the point (rich took 30 s for 12,000 runs): plain cells take it.
    from specfleet.report.grid import Grid, _table_lines

    grid = Grid("2 runs", ("matrix", "tok/s"), (("m-1", "12.50"), ("m-2", "9.25")), left_cols=1)
    assert _table_lines(grid) == ["", "  matrix   tok/s", " " + "─" * 16, "  m-1      12.50",
                                  "  m-2       9.25", ""]
