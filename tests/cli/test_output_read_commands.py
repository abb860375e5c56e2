"""What the read-side commands print, as a demanding user meets it: the exit status of a
failed parity check said on stderr, one CSV header whatever matched, markdown that renders
stored text as text, `results --cells` naming what was asked, a record written in any locale
and without matplotlib's warnings. A real SQLite file, the real Typer app."""

from __future__ import annotations

import csv
import io
import json
import os
import struct
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from markdown_it import MarkdownIt
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.jobs.run import RunSpec
from specfleet.report.plots import FALLBACK_FONTS
from specfleet.report.predictions import Prediction
from specfleet.report.predictions_tables import format_predictions
from specfleet.store import open_store
from tests.store.factory import HOST_A, result

MAIN, BASE, PLAIN_ONLY, NONE, ONE = ("main-000001", "base-000002", "plainonly-000003",
                                     "none-000004", "one-000005")
CODE = "List<int>"  # a prompt name as a code prompt's file might give it
CODE_TEXT = "fn f(v: Vec<u8>) | x"
CJK = "日本語"
LONG = "p" * 120  # names may be 128 characters long


def _runs(matrix_id: str, prompts: tuple[str, ...], arms: tuple[str, ...],
          repeats: int = 3) -> list[RunSpec]:
    return [RunSpec(run_key=f"{matrix_id}/{p}/{r}/{a}", matrix_id=matrix_id, target=HOST_A,
                    model="m1", prompt_name=p, prompt_text=CODE_TEXT if p == CODE else p,
                    arm=a, repeat=r, max_tokens=8)
            for p in prompts for r in range(repeats) for a in arms]


def _matrix(store, matrix_id: str, name: str, runs: list[RunSpec], diverged=(), done=None):
    """`runs` stored done (those `done` keeps, when given), graded 1.5x plain; the arm runs
    of `diverged` prompts reply otherwise than plain."""
    store.create_matrix(name, {"name": name}, runs, matrix_id=matrix_id)
    for run in runs:
        if done is not None and not done(run):
            continue
        rate = (15.0 if run.arm == "graded" else 10.0) + run.repeat * 0.1
        stored = result(run, rate)
        if run.arm != "plain" and run.prompt_name in diverged:
            stored = stored.model_copy(update={"token_ids": [5, 9, 7]})
        store.record_result(stored)
    store.finish_matrix(matrix_id, "done")


@pytest.fixture(scope="module")
def db_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("store") / "specfleet.db"
    with open_store(str(path)) as store:
        _matrix(store, MAIN, "bench <b>x</b>",
                _runs(MAIN, (CODE, CJK, LONG), ("plain", "graded", "hf")), diverged=(CODE,))
        _matrix(store, BASE, "base", _runs(BASE, (CODE, CJK, LONG), ("plain", "graded")))
        _matrix(store, PLAIN_ONLY, "plain only", _runs(PLAIN_ONLY, (CODE,), ("plain", "graded")),
                done=lambda run: run.arm == "plain")
        _matrix(store, NONE, "none", _runs(NONE, (CODE,), ("plain", "graded")),
                done=lambda run: False)
        _matrix(store, ONE, "one", _runs(ONE, (CJK,), ("plain", "graded"), repeats=1))
    return path


def invoke(db_path: Path, *args: str):
    return CliRunner().invoke(app, [*args, "--db", str(db_path)])


def test_a_failed_parity_check_says_why_on_stderr(db_path) -> None:
    # It exited 1 with nothing on stderr: the reason was left to the reader of the table.
    unverified = invoke(db_path, "parity", MAIN, "--no-replay")
    assert unverified.exit_code == 1, unverified.output
    assert unverified.stderr.splitlines() == [
        "parity: exit 1: 1 divergence from plain not replayed (unverified; --allow-unverified "
        "passes it)"]
    regressed = invoke(db_path, "parity", MAIN, "--no-replay", "--allow-unverified",
                       "--baseline", BASE)
    assert regressed.exit_code == 1, regressed.output
    assert regressed.stderr.splitlines() == [f"parity: exit 1: 1 regression against {BASE}"]
    passed = invoke(db_path, "parity", BASE, "--no-replay")
    assert passed.exit_code == 0 and passed.stderr == ""


@pytest.mark.parametrize("empty, full", [
    (["matrix", "show", NONE], ["matrix", "show", MAIN]),
    (["results", "--cells", "--matrix", NONE], ["results", "--cells", "--matrix", MAIN]),
    (["parity", PLAIN_ONLY, "--no-replay"], ["parity", MAIN, "--no-replay"]),
])
def test_csv_has_the_same_header_whatever_matched(db_path, empty, full) -> None:
    # A matrix with no done cell had a 4-column header; scripts read columns by position.
    headers = []
    for args in (empty, full):
        outcome = invoke(db_path, *args, "-o", "csv")
        rows = list(csv.reader(io.StringIO(outcome.stdout)))
        assert len({len(row) for row in rows}) == 1, rows
        headers.append(rows[0])
    assert headers[0] == headers[1]


def test_parity_csv_holds_a_replay_as_json_not_a_python_repr() -> None:
    # The forensics read {'margins': {'row': 1, ...}}: no parser reads Python's repr.
    from specfleet.engine.forensics import PathRow, Replay, RowMargins
    from specfleet.report.parity import ArmParity, ParityReport
    from specfleet.report.parity_tables import render_parity

    path = PathRow(((5, 2.0), (9, 1.0)), 1.0, 1.0, 1)
    replay = Replay(RowMargins(1, 5, 9, path, path), "a", "b")
    report = ParityReport("m-1", 0.25, (ArmParity("h/toy/cpu", "m", "p", "graded", "suspect",
                                                  1, 2, replay),), ())
    (row,) = csv.DictReader(io.StringIO(render_parity(report, "csv")))
    assert json.loads(row["replay"])["margins"]["a"]["gap"] == 1.0 and row["token"] == "1"


def _html(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


def test_markdown_shows_stored_text_holding_angle_brackets(db_path, tmp_path) -> None:
    # `List<int>` rendered as an HTML tag: the prompt read `List`, the matrix name lost <b>.
    shown = _html(invoke(db_path, "matrix", "show", MAIN, "-o", "md").stdout)
    assert "List&lt;int&gt;" in shown and "bench &lt;b&gt;x&lt;/b&gt;" in shown
    assert "<int>" not in shown and "<b>" not in shown
    assert invoke(db_path, "report", MAIN, "--out", str(tmp_path / "r")).exit_code == 0
    record = _html((tmp_path / "r" / f"{MAIN}.md").read_text(encoding="utf-8"))
    assert "fn f(v: Vec&lt;u8&gt;) | x" in record and "<u8>" not in record


def test_replay_tables_keep_a_pipe_in_a_name_inside_its_cell() -> None:
    cell = ("h", "torch", "cpu", "m|1", "p|q")
    counters = {"rounds": 3, "drafted_rounds": 2, "proposed": 5, "accepted": 4}
    text = format_predictions([Prediction(cell, "graded", counters, 5.0, 8.0, 1.5, None)],
                              "vm")
    shown = _html(text)
    assert "<td>m|1</td>" in shown and "<td>p|q</td>" in shown and shown.count("<td>") == 12


def test_cells_list_what_was_asked_and_count_in_the_singular(db_path) -> None:
    # `--arm graded` listed plain's cells too (kept for the speed-ups), under "1 cells".
    one = invoke(db_path, "results", "--cells", "--matrix", MAIN, "--arm", "graded",
                 "--prompt", CJK)
    assert one.exit_code == 0, one.output
    assert one.stdout.startswith("1 cell (done runs)\n")
    assert " graded " in one.stdout and " plain " not in one.stdout
    assert "1.50x" in one.stdout  # still over plain
    run = invoke(db_path, "results", "--matrix", ONE, "--arm", "graded", "-o", "md")
    assert run.exit_code == 0 and run.stdout.startswith("## 1 run\n"), run.output
    for view in (["--cells"], ["--pivot", "target"]):  # plain done, graded not
        outcome = invoke(db_path, "results", *view, "--matrix", PLAIN_ONLY, "--arm", "graded")
        assert outcome.exit_code == 0 and outcome.stdout == "no done runs match these filters\n"


def test_a_filter_takes_a_comma_list_as_bench_does(db_path) -> None:
    # `--arm plain,graded` was "unknown value 'plain,graded'": only repeated flags worked.
    listed = invoke(db_path, "results", "--matrix", f"{MAIN},{BASE}", "--arm", "plain,graded",
                    "-o", "json")
    repeated = invoke(db_path, "results", "--matrix", MAIN, "--matrix", BASE, "--arm", "plain",
                      "--arm", "graded", "-o", "json")
    assert listed.exit_code == 0, listed.output
    assert listed.stdout == repeated.stdout
    assert {(r["matrix_id"], r["arm"]) for r in json.loads(listed.stdout)} == {
        (m, a) for m in (MAIN, BASE) for a in ("plain", "graded")}
    blank = invoke(db_path, "results", "--arm", "plain,")
    assert blank.exit_code == 2 and (
        "--arm: an empty name in 'plain,'; expected comma-separated names" in blank.stderr)


def test_matrix_show_counts_one_peer_reply_in_the_singular(db_path) -> None:
    shown = invoke(db_path, "matrix", "show", MAIN).stdout
    assert "1 peer reply differs (another library's decoding" in shown


def _png_width(path: Path) -> int:
    return struct.unpack(">I", path.read_bytes()[16:20])[0]


def test_a_record_says_its_missing_glyphs_once_and_warns_nothing(db_path, tmp_path) -> None:
    # matplotlib warned twice per draw call for each CJK glyph, and once for the heatmap of a
    # target where only plain is done (an empty image); a 120-character prompt name made a
    # 6,900-pixel heatmap.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        full = invoke(db_path, "report", MAIN, "--out", str(tmp_path / "main"))
        plain = invoke(db_path, "report", PLAIN_ONLY, "--out", str(tmp_path / "plain"))
    assert [str(w.message) for w in caught] == []
    assert full.exit_code == 0 and plain.exit_code == 0
    # Graded never ran: said on stderr in one line as `matrix show` says it; stdout, which a
    # pipe reads, is the record's files alone.
    assert plain.stderr.splitlines() == [
        f"matrix {PLAIN_ONLY}: done; the tables read only its done runs, 3 of 6 (3 pending; "
        f"`specfleet matrix status {PLAIN_ONLY}` says more)"]
    assert plain.stderr == invoke(db_path, "matrix", "show", PLAIN_ONLY).stderr
    assert plain.stdout.splitlines()[0] == f"record: {tmp_path / 'plain' / f'{PLAIN_ONLY}.md'}"
    assert all(line.startswith("  ") for line in plain.stdout.splitlines()[1:])
    from matplotlib import font_manager

    if not {f.name for f in font_manager.fontManager.ttflist} & set(FALLBACK_FONTS):
        assert full.stderr.splitlines() == [
            "note: no installed font draws 日 本 語: the plots show boxes for them (the "
            "markdown has every name whole)"]
    heatmap = tmp_path / "main" / "speedup-mac1-mlx-metal.png"
    assert _png_width(heatmap) < 2000
    assert _png_width(tmp_path / "plain" / "speedup-mac1-mlx-metal.png") > 0


def test_matrix_run_s_record_says_its_missing_glyphs_as_report_does(db_path, tmp_path,
                                                                     capsys) -> None:
    # `matrix run --report-dir` gathered matplotlib's warnings but said nothing of them.
    from matplotlib import font_manager

    from specfleet.cli.matrix import _write_report

    if {f.name for f in font_manager.fontManager.ttflist} & set(FALLBACK_FONTS):
        pytest.skip("a font here draws every glyph of the seeded names")
    with open_store(str(db_path)) as store:
        _write_report(store, MAIN, tmp_path)
    assert capsys.readouterr().err.splitlines()[1:] == [
        "note: no installed font draws 日 本 語: the plots show boxes for them (the markdown "
        "has every name whole)"]


def test_a_record_is_written_in_an_ascii_locale(db_path, tmp_path) -> None:
    # A Latin-1 or ASCII locale made write_text fail on the tables' "–": a traceback.
    env = {**os.environ, "LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0",
           "PYTHONCOERCECLOCALE": "0"}
    env.pop("PYTHONIOENCODING", None)
    out = tmp_path / "rec"
    done = subprocess.run(
        [sys.executable, "-c", "from specfleet.cli.entry import main; main()", "report", BASE,
         "--out", str(out), "--db", str(db_path)],
        capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "±" in (out / f"{BASE}.md").read_text(encoding="utf-8")
