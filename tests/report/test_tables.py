"""The matrix tables on a seeded store: known speed-ups, markers, formats, pivot."""

from __future__ import annotations

import csv
import io
import json
import re
from types import SimpleNamespace

import pytest

from specfleet.errors import UserError
from specfleet.report.results import render_matrix
from specfleet.report.tables import parity_summary, speedup_text
from specfleet.stats.view import CellView
from tests.report.conftest import DEMO_ID


def _line(text: str, *needles: str) -> str:
    """The one line of `text` containing every needle."""
    lines = [line for line in text.splitlines() if all(n in line for n in needles)]
    assert len(lines) == 1, (needles, lines)
    return lines[0]


def test_table_shows_speedups_markers_and_headline(store) -> None:
    text = render_matrix(store, DEMO_ID)
    assert "Prompt lookup over plain — h1/toy/cpu" in text
    graded = _line(text.split("— h2/toy/cpu")[0], "script", "graded", "1.50x")
    assert graded.count("1.50x ±2.7% gain =") == 2
    gated = _line(text.split("— h2/toy/cpu")[0], "script", "gated", "within noise")
    assert "±20.0%!" in gated and "1.00x ±1.0% within noise =" in gated
    assert "4.00x ±0.0% gain LOOP =" in text
    assert "Headline graded: 1.50x geometric mean over 2 cells (2 gains" in text
    assert "Kept out of the graded headline (replies loop): constant/copy 4.00x" in text
    h2 = text.split("Prompt lookup over plain — h2/toy/cpu")[1]
    assert "1.50x ±2.7% gain ≠" in _line(h2.split("Headline")[0], "graded")
    assert "diverges at token 5 (char 5) in repeat 0" in h2
    # h2 copy graded's replies are not plain's: apart from its headline, as a looping cell
    assert "Kept out of the graded headline (reply ≠ plain): script/copy 1.50x" in h2
    assert ("Parity vs plain (every repetition, 42 replies compared): 8 identical, 1 diverged; "
            "`specfleet parity demo-000001` replays each divergence") in text


def test_the_parity_line_counts_a_peer_s_different_reply_apart_from_ours() -> None:
    # llama.cpp decodes 4-bit blocks: its reply differing is information, not a divergence
    # of ours to replay; our own arms' divergences still point at the forensics.
    cells = [SimpleNamespace(arm=arm, parity=parity, parity_replies=1) for arm, parity in (
        ("plain", None), ("calibrated", "identical"), ("hf-lookup", "identical"),
        ("llama.cpp", "diverged"), ("llama.cpp-lookup", "diverged"))]
    view = SimpleNamespace(matrix_id="bench-1", cells=cells)
    assert parity_summary(view) == (
        "Parity vs plain (every repetition, 5 replies compared): 2 identical, 0 diverged; 2 "
        "peer replies differ "
        "(another library's decoding: information, not a failure).")
    cells.append(SimpleNamespace(arm="graded", parity="diverged", parity_replies=1))
    assert parity_summary(view).startswith(
        "Parity vs plain (every repetition, 6 replies compared): 2 identical, 1 diverged; "
        "`specfleet parity bench-1` "
        "replays each divergence (near-tie or suspect); 2 peer replies differ")


def test_plain_and_counters_tables(store) -> None:
    text = render_matrix(store, DEMO_ID)
    plain = text.split("Plain decoding, tok/s (median) — h1/toy/cpu")[1].split("Prompt")[0]
    assert re.search(r"script +100\.0 ±2\.0% +100\.0 ±2\.0%\n", plain), plain
    # A looping plain cell is marked as its speed-ups are (it was unmarked).
    assert re.search(r"constant +50\.0 ±0\.0% LOOP +–\n", plain), plain
    counters = text.split("Counters (first repetition) and parity (every repetition) — h1/toy/cpu")[1]
    row = _line(counters.split("Plain decoding")[0], "graded", "15/11")
    assert "4/3/0" in row and "0.7333" in row and "3.7500" in row and "identical" in row
    assert "150.00 [150.00, 152.00, 148.00]" in row


def test_markdown_has_pipe_tables(store) -> None:
    text = render_matrix(store, DEMO_ID, fmt="markdown")
    assert "### Prompt lookup over plain — h1/toy/cpu" in text
    assert "| script | graded | 1.50x ±2.7% gain = | 1.50x ±2.7% gain = |" in text


def test_json_and_csv_carry_every_cell(store) -> None:
    body = json.loads(render_matrix(store, DEMO_ID, fmt="json"))
    cells = {(c["target"], c["model"], c["prompt"], c["arm"]): c for c in body["cells"]}
    assert len(cells) == 14
    graded = cells[("h1/toy/cpu", "script", "copy", "graded")]
    assert graded["speedup"] == pytest.approx(1.5) and graded["rates"] == [150.0, 152.0, 148.0]
    assert (graded["verdict"], graded["speedup_low"], graded["speedup_high"],
            graded["speedup_coverage"]) == ("gain", pytest.approx(148 / 101),
                                            pytest.approx(152 / 99), 0.9)
    assert cells[("h1/toy/cpu", "script", "copy", "gated")]["verdict"] == "within noise"
    assert cells[("h1/toy/cpu", "constant", "copy", "graded")]["loop"] is True
    assert cells[("h2/toy/cpu", "script", "copy", "graded")]["diverge_token"] == 5
    graded_h1 = next(h for h in body["headlines"] if (h["target"], h["arm"]) ==
                     ("h1/toy/cpu", "graded"))
    assert graded_h1["geomean_speedup"] == pytest.approx(1.5)
    assert graded_h1["looping_excluded"] == 1
    rows = list(csv.DictReader(io.StringIO(render_matrix(store, DEMO_ID, fmt="csv"))))
    assert len(rows) == 14
    assert {r["spread_flag"] for r in rows if r["arm"] == "gated" and r["prompt"] == "echo"} == {
        "True"}


def test_pivot_puts_targets_side_by_side(store) -> None:
    text = render_matrix(store, DEMO_ID, pivot="target")
    row = _line(text, "script", "copy", "graded")
    assert row.count("100.0 tok/s · 1.50x ±2.7%") == 2 and "≠" in row
    assert "constant" in text and "gated" not in _line(text, "constant", "copy")
    rows = list(csv.DictReader(io.StringIO(render_matrix(store, DEMO_ID, "csv", "target"))))
    first = next(r for r in rows if (r["model"], r["prompt"], r["arm"]) ==
                 ("script", "copy", "graded"))
    assert first["h2/toy/cpu:parity"] == "diverged"
    assert float(first["h1/toy/cpu:speedup"]) == pytest.approx(1.5)


def test_pivot_says_an_arm_that_never_ran_on_a_target(tmp_path, worker) -> None:
    # A peer skipped on the other engine read "7.3 tok/s · –", as if it had no speed-up.
    from specfleet.store.store import open_store
    from tests.report.seed import H1, H2, PLAIN_RATES, Seed, seed_matrix

    with open_store(str(tmp_path / "s.db")) as store:
        seed_matrix(store, worker, "one", [
            Seed(H1, "script", "copy", "plain", tuple(PLAIN_RATES)),
            Seed(H1, "script", "copy", "graded", (150.0, 152.0, 148.0)),
            Seed(H2, "script", "copy", "plain", tuple(PLAIN_RATES))], "one-000001")
        row = _line(render_matrix(store, "one-000001", pivot="target"), "script", "graded")
    assert "100.0 tok/s · 1.50x" in row and row.rstrip().endswith("100.0 tok/s · no done run")


def test_pivot_says_a_peer_arm_is_not_planned_on_another_engine(store) -> None:
    # A peer skipped by design on an MLX target read "no done run", as if a run had failed.
    from dataclasses import replace

    from specfleet.report.build import build_view
    from specfleet.report.tables import pivot_cols

    view = build_view(store, DEMO_ID)
    plain, graded = (view.cell("h1/toy/cpu", "script", "copy", arm) for arm in ("plain", "graded"))
    torch, mlx = "h3/torch/cpu", "h4/mlx/cpu"
    cells = (replace(plain, target=torch), replace(graded, target=torch, arm="hf-lookup"),
             replace(graded, target=torch), replace(plain, target=mlx))
    view = replace(view, targets=(torch, mlx), cells=cells, arms=("plain", "graded", "hf-lookup"))
    assert pivot_cols(view, view.targets, "script", "copy", "hf-lookup")[1] == (
        "100.0 tok/s · runs on torch only")
    assert pivot_cols(view, view.targets, "script", "copy", "graded")[1] == (
        "100.0 tok/s · no done run")


@pytest.mark.parametrize("kwargs", [{"fmt": "html"}, {"pivot": "model"}])
def test_bad_format_or_pivot_is_a_user_error(store, kwargs) -> None:
    with pytest.raises(UserError):
        render_matrix(store, DEMO_ID, **kwargs)


def test_unknown_matrix_is_a_user_error(store) -> None:
    with pytest.raises(UserError, match="nope"):
        render_matrix(store, "nope")


def test_speedup_text_markers() -> None:
    cell = CellView("t", "m", "p", "gated", (1.0,), 1.0, 0.07, speedup=0.97, spread_flag=True,
                    loop=True, parity="diverged")
    assert speedup_text(cell) == "0.97x ±7.0%! LOOP ≠"
    assert speedup_text(None) == "–"
    single = CellView("t", "m", "p", "graded", (7.7,), 7.7, 0.0, speedup=0.77, no_verdict_n=1,
                      verdict="no verdict")
    assert speedup_text(single) == "0.77x n=1, no verdict"


def test_view_marks_single_repeats_and_the_footer_names_noisy_runs() -> None:
    from specfleet.report.build import view_of_runs
    from specfleet.report.tables import grids_for

    rows = [dict(host="h", engine="torch", device="cpu", model="m", prompt_name="p", arm=arm,
                 repeat=0, tok_per_s=rate, status="done", noisy=arm == "graded", plan_order=i,
                 matrix_id="x-1", token_ids=[1, 2], output_text="ab")
            for i, (arm, rate) in enumerate((("plain", 10.0), ("graded", 7.7)))]
    view = view_of_runs("x-1", "x", [_Obj(r) for r in rows])
    graded = view.cell("h/torch/cpu", "m", "p", "graded")
    assert (graded.no_verdict_n, graded.verdict, graded.speedup_low) == (1, "no verdict", None)
    notes = grids_for(view)[-1].notes
    assert any(n.startswith("Noisy runs") and "h/torch/cpu m/p graded: 1 of 1" in n
               for n in notes)
    headline = next(n for n in grids_for(view)[1].notes if n.startswith("Headline"))
    assert "0 losses" in headline and "1 under 3 repeats: no verdict" in headline


class _Obj:
    def __init__(self, data: dict) -> None:
        self.__dict__.update(data)

    def __getattr__(self, name: str):
        return None


def test_matrix_without_done_runs(store) -> None:
    from specfleet.jobs.run import RunSpec
    from tests.report.seed import H1

    spec = RunSpec(run_key="pending-000009/0", target=H1, model="script", prompt_name="copy",
                   prompt_text="x", arm="plain", max_tokens=4)
    store.create_matrix("pending", {}, [spec], matrix_id="pending-000009")
    assert "no done runs yet" in render_matrix(store, "pending-000009")
    assert json.loads(render_matrix(store, "pending-000009", fmt="json"))["cells"] == []


def test_a_gain_or_loss_never_reads_as_1_00x() -> None:
    # Plain 100/100.1/100.2 against 99.6/99.7/99.75 read "1.00x ±0.2% loss", its interval
    # "0.99-1.00x": the verdict was right (0.994-0.9975x), the display hid it.
    from specfleet.report.history import change_text
    from specfleet.report.tables import interval_text
    from specfleet.stats.changes import detect_change
    from specfleet.stats.view import view_of_runs

    rows = [SimpleNamespace(host="h", engine="torch", device="cpu", model="m", prompt_name="p",
                            arm=arm, repeat=i, tok_per_s=rate, status="done", loop_share=0.0)
            for arm, rates in (("plain", (100.0, 100.1, 100.2)), ("graded", (99.6, 99.7, 99.75)))
            for i, rate in enumerate(rates)]
    cell = view_of_runs("x", "x", rows).cell("h/torch/cpu", "m", "p", "graded")
    assert cell is not None and cell.verdict == "loss"
    assert speedup_text(cell).startswith("0.996x ±0.2% loss")
    assert interval_text(cell.speedup_low, cell.speedup_high, 0.9) == "90% interval 0.994-0.998x"
    assert interval_text(0.89, 1.21, 0.9) == "90% interval 0.89-1.21x"  # holds 1: as it was
    change = detect_change([100.0, 100.1, 100.2], [99.6, 99.7, 99.75])
    assert change_text(change).startswith("CHANGED 0.996x (90% interval 0.994-0.998x)")


def test_a_change_beyond_noise_but_inside_the_factor_says_so() -> None:
    # With --factor 1.5 a 0.70x change (interval 0.69-0.71x) read "within noise".
    from specfleet.report.history import change_text
    from specfleet.stats.changes import detect_change

    inside = detect_change([20.0, 20.1, 19.9], [14.0, 14.1, 13.9], factor=1.5)
    assert change_text(inside).startswith("within --factor 0.70x (90% interval 0.69-0.71x)")
    noise = detect_change([20.0, 20.1, 19.9], [20.05, 19.95, 20.2], factor=1.5)
    assert change_text(noise).startswith("within noise ")
