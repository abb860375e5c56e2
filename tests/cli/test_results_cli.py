"""`results`, `history`, `compare` and `matrix show` through the real Typer app on a seeded
SQLite store (`--db`)."""

from __future__ import annotations

import csv
import io
import json

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app
from tests.report.conftest import AFTER_ID, DEMO_ID, MIXED_ID, db_path, worker  # noqa: F401

runner = CliRunner()


def invoke(db_path, *args: str):  # noqa: F811
    return runner.invoke(app, [*args, "--db", str(db_path)])


def test_matrix_show_table_and_pivot(db_path) -> None:  # noqa: F811
    result = invoke(db_path, "matrix", "show", DEMO_ID)
    assert result.exit_code == 0, result.output
    assert "1.50x ±2.7% gain =" in result.output and "4.00x ±0.0% gain LOOP =" in result.output
    assert "±20.0%! within noise" in result.output
    pivot = invoke(db_path, "matrix", "show", DEMO_ID, "--pivot", "target", "--format", "json")
    rows = json.loads(pivot.stdout)["rows"]
    graded = next(r for r in rows if (r["model"], r["prompt"], r["arm"]) ==
                  ("script", "copy", "graded"))
    assert graded["targets"]["h2/toy/cpu"]["parity"] == "diverged"


def test_results_runs_and_filters(db_path) -> None:  # noqa: F811
    result = invoke(db_path, "results", "--matrix", MIXED_ID, "--arm", "graded",
                    "--format", "json")
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)
    assert [r["tok_per_s"] for r in runs] == [120.0, 121.0, 119.0]
    table = invoke(db_path, "results", "--matrix", MIXED_ID)
    assert "6 runs" in table.output
    both = invoke(db_path, "results", "--matrix", DEMO_ID, "--matrix", AFTER_ID, "--host", "h2",
                  "--prompt", "copy", "--arm", "graded", "--format", "csv")
    assert len(list(csv.DictReader(io.StringIO(both.stdout)))) == 6


def test_decode_rates_beside_and_as_the_headline(db_path) -> None:  # noqa: F811
    whole = json.loads(invoke(db_path, "matrix", "show", DEMO_ID, "-o", "json").stdout)
    decode = json.loads(invoke(db_path, "matrix", "show", DEMO_ID, "-o", "json",
                               "--rate", "decode").stdout)
    assert (whole["rate"], decode["rate"]) == ("whole", "decode")
    by_key = {(c["target"], c["model"], c["prompt"], c["arm"]): c for c in whole["cells"]}
    for cell in decode["cells"]:
        twin = by_key[(cell["target"], cell["model"], cell["prompt"], cell["arm"])]
        assert cell["median_tok_per_s"] == pytest.approx(twin["median_decode_tok_per_s"])
        assert twin["median_prompt_tok_per_s"] > 0
    table = invoke(db_path, "matrix", "show", DEMO_ID, "--rate", "decode").stdout
    assert "decode only" in table and "decode / prompt tok/s" in table
    runs = invoke(db_path, "results", "--matrix", DEMO_ID).stdout
    assert "decode tok/s" in runs
    bad = invoke(db_path, "matrix", "show", DEMO_ID, "--rate", "prefill")
    assert bad.exit_code == 2 and "--rate" in bad.stderr


def test_results_time_range(db_path) -> None:  # noqa: F811
    since = invoke(db_path, "results", "--matrix", MIXED_ID, "--since", "2000-01-01")
    assert "6 runs" in since.output
    until = invoke(db_path, "results", "--matrix", MIXED_ID, "--until", "2000-01-01T00:00+00:00")
    assert until.exit_code == 0 and "0 runs" in until.output


def test_results_cells_and_pivot(db_path) -> None:  # noqa: F811
    cells = invoke(db_path, "results", "--matrix", DEMO_ID, "--model", "script", "--cells",
                   "--format", "json")
    records = json.loads(cells.stdout)
    assert len(records) == 12
    graded = [r for r in records if r["arm"] == "graded"]
    assert {round(r["speedup"], 3) for r in graded} == {1.5}
    pivot = invoke(db_path, "results", "--matrix", DEMO_ID, "--pivot", "target")
    assert pivot.exit_code == 0 and "h1/toy/cpu" in pivot.output and "h2/toy/cpu" in pivot.output
    assert "Across targets" in pivot.output
    # Plain alone matched: it said "no done runs match these filters".
    plain = invoke(db_path, "results", "--matrix", DEMO_ID, "--arm", "plain", "--pivot", "target")
    assert plain.exit_code == 0 and plain.output.startswith(
        "the pivot's rows are the arms beside plain, and these filters leave plain alone"), \
        plain.output
    for view in (["--cells"], ["--pivot", "target"]):  # it pointed at a matrix 'results'
        empty = invoke(db_path, "results", "--matrix", DEMO_ID, "--since", "9000-01-01", *view)
        assert (empty.exit_code, empty.output) == (0, "no done runs match these filters\n")
        # A value no stored run holds is a typo, not a query that matched nothing.
        typo = invoke(db_path, "results", "--matrix", DEMO_ID, "--model", "nobody", *view)
        assert typo.exit_code == 2 and typo.stderr.startswith(
            "error: --model: no stored run has 'nobody'; expected one of the stored "
            "values: "), typo.stderr


def test_results_cells_of_one_arm_keep_the_plain_runs_its_speedups_need(db_path) -> None:  # noqa: F811
    cells = json.loads(invoke(db_path, "results", "--matrix", DEMO_ID, "--model", "script",
                              "--arm", "graded", "--cells", "--format", "json").stdout)
    graded = [r for r in cells if r["arm"] == "graded"]
    assert graded and {round(r["speedup"], 3) for r in graded} == {1.5}
    runs = json.loads(invoke(db_path, "results", "--matrix", DEMO_ID, "--arm", "graded",
                             "--format", "json").stdout)
    assert {r["arm"] for r in runs} == {"graded"}  # plain runs join only for speed-ups


def test_history_flags_a_change_and_names_the_test(db_path) -> None:  # noqa: F811
    result = invoke(db_path, "history", "--model", "script", "--prompt", "copy", "--arm",
                    "graded", "--target", "h1/toy/cpu")
    assert result.exit_code == 0, result.output
    assert "CHANGED 0.80x (90% interval 0.78-0.82x)" in result.output
    note = " ".join(result.output.split())  # the table wraps the note
    assert ("Change test, after over before: gain or loss (faster or slower) only when the 90% "
            "interval on the ratio of medians excludes 1x") in note
    body = json.loads(invoke(db_path, "history", "--model", "script", "--prompt", "copy",
                             "--arm", "graded", "--format", "json").stdout)
    assert [(r["target"], r["matrix_id"]) for r in body][:2] == [
        ("h1/toy/cpu", DEMO_ID), ("h1/toy/cpu", AFTER_ID)]


def test_compare_factor_only_changed_and_markdown(db_path) -> None:  # noqa: F811
    rows = json.loads(invoke(db_path, "compare", DEMO_ID, AFTER_ID, "--format", "json",
                             "--only-changed", "--fail-on", "none").stdout)["cells"]
    assert [r["verdict"] for r in rows] == ["regression"] and rows[0]["arm"] == "graded"
    wide = invoke(db_path, "compare", DEMO_ID, AFTER_ID, "--factor", "1.3", "-o", "md")
    assert wide.exit_code == 0, wide.output  # 0.80x lies inside 1.3x either way
    assert wide.stdout.startswith("## ") and "| regression |" not in wide.stdout
    assert "beyond 1.3x either way" in wide.stdout


def test_history_fails_on_a_regression_at_the_newest_point(db_path) -> None:  # noqa: F811
    args = ("history", "--model", "script", "--prompt", "copy", "--arm", "graded", "--target",
            "h1/toy/cpu", "--format", "json")
    body = json.loads(invoke(db_path, *args, "--fail-on", "none").stdout)
    newest = body[-1]
    failing = invoke(db_path, *args)
    regressed = (newest["change"]["changed"] and newest["change"]["ratio"] < 1
                 and not newest["differs"])
    assert failing.exit_code == (1 if regressed else 0), failing.output
    assert all(r["n"] == len(r["values"]) for r in body)
    changed = json.loads(invoke(db_path, *args, "--only-changed", "--fail-on", "none").stdout)
    assert changed and all(r["change"]["changed"] for r in changed)
    # The table says how many points it left out (an empty one said nothing).
    table = invoke(db_path, *args[:-2], "--only-changed", "--fail-on", "none").stdout
    assert f"Showing the {len(changed)} of {len(body)} points that changed." in " ".join(
        table.split()), table


def test_compare_json_carries_the_coverage_the_web_api_gives(db_path) -> None:  # noqa: F811
    # `compare -o json` was the cells alone: a script could not tell 4 of 8 cells compared
    # (exit 1) from all of them, which `/api/compare` says in `coverage`.
    from tests.serve.conftest import client_of

    for b, complete in ((AFTER_ID, True), (MIXED_ID, False)):
        cli = invoke(db_path, "compare", DEMO_ID, b, "-o", "json", "--fail-on", "none")
        assert cli.exit_code == (0 if complete else 1), cli.output
        body = json.loads(cli.stdout)
        assert body["coverage"]["complete"] is complete
        assert body["coverage"]["compared"] == len(body["cells"])
        for web in client_of(f"sqlite:///{db_path}"):
            assert web.get(f"/api/compare?a={DEMO_ID}&b={b}").json() == body


def test_compare_calls_a_regression_only_with_same_provenance(db_path) -> None:  # noqa: F811
    same = invoke(db_path, "compare", DEMO_ID, AFTER_ID)
    assert same.exit_code == 1, same.output  # a regression fails the check
    assert "REGRESSION" in same.output and "1 regression in 14 cells" in same.output
    assert same.stderr.strip() == f"compare: 1 regressions ({AFTER_ID} against {DEMO_ID})"
    assert invoke(db_path, "compare", DEMO_ID, AFTER_ID, "--fail-on", "none").exit_code == 0
    mixed = invoke(db_path, "compare", DEMO_ID, MIXED_ID, "--format", "json")
    row = next(r for r in json.loads(mixed.stdout)["cells"] if r["arm"] == "graded")
    assert row["verdict"] == "slower" and row["differs"] == ["prompt hash"]
    assert row["ratio"] == pytest.approx(0.8)
    text = invoke(db_path, "compare", DEMO_ID, MIXED_ID).output
    assert "not called a regression, the cells differ in prompt hash" in text
    allowed = invoke(db_path, "compare", DEMO_ID, MIXED_ID, "--allow-mixed").output
    assert "REGRESSION (--allow-mixed; the cells differ in prompt hash)" in allowed


@pytest.mark.parametrize("args, needle", [
    (["matrix", "show", "nope-123456"], "nope-123456"),
    (["matrix", "show", DEMO_ID, "--format", "html"], "--format"),
    (["matrix", "show", DEMO_ID, "--pivot", "host"], "--pivot"),
    (["results", "--engine", "cuda"], "--engine"),
    (["results", "--arm", "fast"], "--arm"),
    (["results", "--since", "yesterday"], "--since"),
    (["results", "--since", "2026-02-01", "--until", "2026-01-01"], "--since"),
    (["results", "--matrix", "nope-123456"], "nope-123456"),
    (["results", "--format", "xml"], "--format"),
    (["history", "--model", "script", "--prompt", "copy", "--arm", "fixed"], "no done runs"),
    (["history", "--model", "script", "--prompt", "copy", "--arm", "graded", "--target",
      "a/b/c/d"], "--target"),
    (["compare", DEMO_ID, "nope-123456"], "nope-123456"),
    (["compare", DEMO_ID, AFTER_ID, "--format", "html"], "--format"),
    (["compare", DEMO_ID, AFTER_ID, "--fail-on", "always"], "--fail-on"),
    (["compare", DEMO_ID, AFTER_ID, "--factor", "0.5"], "--factor"),
    (["results", "--cells", "--limit", "5"], "--limit"),
    (["results", "--limit", "0"], "--limit"),
    (["history", "--model", "script", "--prompt", "copy", "--arm", "graded", "--last", "0"],
     "--last"),
])
def test_bad_input_is_one_line_and_exit_2(db_path, args, needle) -> None:  # noqa: F811
    result = invoke(db_path, *args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_a_matrix_id_cut_short_is_named_in_full(db_path) -> None:  # noqa: F811
    result = invoke(db_path, "results", "--matrix", DEMO_ID[:-2])
    assert result.exit_code == 2, result.output
    assert f"expected a whole id (did you mean {DEMO_ID!r}?)" in result.stderr
    unknown = invoke(db_path, "matrix", "show", "zz-nope")
    assert "expected an id that `specfleet matrix list` shows" in unknown.stderr


def test_markdown_has_one_heading_and_empty_csv_keeps_its_header(db_path) -> None:  # noqa: F811
    for view in ([], ["--cells"]):
        text = invoke(db_path, "results", "--matrix", DEMO_ID, "--format", "md", *view).stdout
        assert text.startswith("## ") and "\n### " not in text, text[:200]
    empty = invoke(db_path, "results", "--matrix", DEMO_ID, "--since", "9000-01-01",
                   "--format", "csv").stdout
    assert empty.startswith("run_key,matrix_id,") and empty.count("\n") == 1
    unchanged = invoke(db_path, "compare", DEMO_ID, AFTER_ID, "--only-changed", "--format", "csv",
                       "--fail-on", "none").stdout
    assert unchanged.splitlines()[0].startswith("target,model,prompt,arm,median_a,median_b")


# Each damaged column with commands that read it (a table of runs reads no JSON column,
# compare no finish time).
@pytest.mark.parametrize(("column", "value", "commands"), [
    ("versions", "{not json", (["results", "-o", "json"], ["compare", DEMO_ID, AFTER_ID])),
    ("finished_at", "yesterday", (["results"], ["results", "-o", "csv"]))])
def test_a_hand_damaged_value_is_one_line(db_path, tmp_path, column, value,  # noqa: F811
                                          commands) -> None:
    import shutil
    import sqlite3

    damaged = tmp_path / "damaged.db"
    shutil.copy(db_path, damaged)
    with sqlite3.connect(damaged) as conn:
        conn.execute(f"UPDATE runs SET {column} = ? WHERE rowid = 1", (value,))
    for args in commands:
        result = invoke(damaged, *args)
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and "a stored value cannot be read" in result.stderr
        assert "expected the store as specfleet wrote it" in result.stderr


def test_a_slow_down_timed_on_a_busy_host_is_no_regression(db_path, tmp_path) -> None:  # noqa: F811
    # `matrix run` flagged every run of B noisy, and compare still failed on 6 "regressions".
    import shutil
    import sqlite3

    busy = tmp_path / "busy.db"
    shutil.copy(db_path, busy)
    with sqlite3.connect(busy) as conn:
        conn.execute("UPDATE runs SET noisy = 1 WHERE matrix_id = ?", (AFTER_ID,))
    result = invoke(busy, "compare", DEMO_ID, AFTER_ID, "--format", "json")
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.stdout)["cells"] if r["arm"] == "graded"
               and r["verdict"] != "within noise")
    assert row["verdict"] == "slower" and row["differs"] == ["host load (noisy runs)"]
    history = json.loads(invoke(busy, "history", "--model", "script", "--prompt", "copy", "--arm",
                                "graded", "--target", "h1/toy/cpu", "--format", "json").stdout)
    assert "host load (noisy runs)" in history[-1]["differs"]


def test_json_stays_strict_json_with_a_zero_median_or_an_inf_rate(db_path, tmp_path) -> None:  # noqa: F811
    # json.dumps wrote `Infinity` (not JSON: jq and JSON.parse refuse the document) for the
    # ratio over a zero median and for a hand-edited store's `inf` tok/s.
    import shutil
    import sqlite3

    odd = tmp_path / "odd.db"
    shutil.copy(db_path, odd)
    with sqlite3.connect(odd) as conn:
        conn.execute("UPDATE runs SET tok_per_s = 0 WHERE matrix_id = ? AND arm = 'plain'",
                     (DEMO_ID,))
        conn.execute("UPDATE runs SET tok_per_s = 1e999 WHERE matrix_id = ? AND rowid = "
                     "(SELECT min(rowid) FROM runs WHERE matrix_id = ?)", (AFTER_ID, AFTER_ID))
    cell = ("--model", "script", "--prompt", "copy", "--arm", "plain", "--fail-on", "none")
    for args in (["results"], ["results", "--cells"], ["results", "--cells", "--pivot", "target"],
                 ["matrix", "show", AFTER_ID], ["matrix", "show", AFTER_ID, "--pivot", "target"],
                 ["compare", DEMO_ID, AFTER_ID, "--fail-on", "none"], ["history", *cell]):
        result = invoke(odd, *args, "--format", "json")
        assert result.exit_code == 0, (args, result.output)
        json.loads(result.stdout, parse_constant=pytest.fail)  # fails naming `Infinity`
    runs = json.loads(invoke(odd, "results", "--matrix", AFTER_ID, "--format", "json").stdout)
    assert runs[0]["tok_per_s"] is None
    compared = json.loads(invoke(odd, "compare", DEMO_ID, AFTER_ID, "--format", "json",
                                 "--fail-on", "none").stdout)["cells"]
    assert None in [r["ratio"] for r in compared if r["arm"] == "plain"]


def sampled_after(db_path, tmp_path):  # noqa: F811
    """A copy of the store whose AFTER matrix was sampled at temperature 0.8 (seed 3)."""
    import shutil
    import sqlite3

    mixed = tmp_path / "sampled.db"
    shutil.copy(db_path, mixed)
    with sqlite3.connect(mixed) as conn:
        conn.execute("UPDATE runs SET temperature = 0.8, seed = 3 WHERE matrix_id = ?",
                     (AFTER_ID,))
    return mixed


def test_cells_never_pool_greedy_and_sampled_runs(db_path, tmp_path) -> None:  # noqa: F811
    # One cell held the greedy and the sampled runs alike: n=9, a 162% spread, one speed-up.
    mixed = sampled_after(db_path, tmp_path)
    cell = ("--model", "script", "--prompt", "copy", "--arm", "graded", "--host", "h1")
    first = invoke(db_path, "results", "--cells", *cell, "-o", "json")
    assert first.exit_code == 0, first.output
    pooled = json.loads(first.stdout)
    apart = json.loads(invoke(mixed, "results", "--cells", *cell, "-o", "json").stdout)
    assert [c["temperature"] for c in pooled] == [0.0]
    assert [c["temperature"] for c in apart] == [0.0, 0.8]
    assert sum(c["n"] for c in apart) == pooled[0]["n"]
    table = invoke(mixed, "results", "--cells", *cell).stdout
    assert " T0.8 " in table and "T0.8 after it: runs sampled at temperature 0.8" in table


def test_history_follows_greedy_and_sampled_runs_as_two_series(db_path, tmp_path) -> None:  # noqa: F811
    # One series held both: a sampled point was compared with the greedy one before it.
    mixed = sampled_after(db_path, tmp_path)
    cell = ("--model", "script", "--prompt", "copy", "--arm", "graded", "--target", "h1/toy/cpu")
    rows = json.loads(invoke(mixed, "history", *cell, "--format", "json").stdout)
    greedy = [r for r in rows if r["temperature"] == 0.0]
    (sampled,) = [r for r in rows if r["temperature"] == 0.8]
    assert sampled["matrix_id"] == AFTER_ID and sampled["change"] is None  # a series of its own
    assert AFTER_ID not in {r["matrix_id"] for r in greedy} and greedy[0]["change"] is None
    assert all(r["change"] is not None for r in greedy[1:])  # the greedy points still follow
    assert " T0.8 " in invoke(mixed, "history", *cell).stdout


def test_results_lists_the_runs_planned_last_and_says_how_many_matched(db_path) -> None:  # noqa: F811
    # A year of nightly matrices printed all 12,000 runs (50 s): --limit takes the newest.
    every = json.loads(invoke(db_path, "results", "-o", "json").stdout)
    newest = json.loads(invoke(db_path, "results", "--limit", "4", "-o", "json").stdout)
    assert newest == every[-4:] and every[-1]["matrix_id"] == MIXED_ID  # planned last
    table = invoke(db_path, "results", "--matrix", DEMO_ID, "--limit", "2", "-o", "md").stdout
    demo = [r for r in every if r["matrix_id"] == DEMO_ID]
    assert [line.split(" | ")[5] for line in table.splitlines() if line.startswith(
        f"| {DEMO_ID}")] == [str(r["repeat"]) for r in demo[-2:]]
    assert (f"Showing the 2 runs planned last of the {len(demo)} that match; --limit "
            f"{len(demo)} lists them all.") in table
    whole = invoke(db_path, "results", "--matrix", DEMO_ID, "--limit", str(len(demo))).stdout
    assert "Showing" not in whole and f"{len(demo)} runs" in whole


def test_a_table_of_more_runs_than_it_shows_says_how_to_list_them_all(tmp_path) -> None:
    from specfleet.report.results import RUNS_SHOWN
    from specfleet.store.store import open_store
    from tests.store.factory import spec

    url = f"sqlite:///{tmp_path / 's.db'}"
    total = RUNS_SHOWN + 1
    with open_store(url) as store:
        store.create_matrix("big", {}, [spec(f"k{i}", repeat=i) for i in range(total)],
                            matrix_id="big-000001")
    table = runner.invoke(app, ["results", "--db", url])
    assert table.exit_code == 0, table.output
    assert table.stdout.startswith(f"{RUNS_SHOWN} runs\n") and " 0   pending" not in table.stdout
    assert table.stdout.rstrip().endswith(f"Showing the {RUNS_SHOWN} runs planned last of the "
                                          f"{total} that match; --limit {total} lists them all.")
    rows = list(csv.DictReader(io.StringIO(runner.invoke(app, ["results", "--db", url, "-o",
                                                               "csv"]).stdout)))
    assert len(rows) == total  # an export keeps every run
