"""`Against peers` compares our arm's and the peer's geometric means over the cells both
measured: a peer that failed on a prompt is not compared on the others' cells (the review's
case read `calibrated 1.41x hf-lookup` where the one common cell was 1.00x against 1.00x)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specfleet.report.tables import peer_headline
from specfleet.stats.view import view_of_runs

T = "h/torch/cpu"


def _run(prompt: str, arm: str, repeat: int, tok_per_s: float, status: str = "done",
         loop_share: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(host="h", engine="torch", device="cpu", model="m", prompt_name=prompt,
                           arm=arm, repeat=repeat, status=status, tok_per_s=tok_per_s,
                           loop_share=loop_share)


def _matrix(peer_on_copy: str = "failed", calibrated_on_prose: float = 1.0) -> list:
    runs = []
    for i in range(3):
        runs += [_run("copy", "plain", i, 100 + i), _run("copy", "calibrated", i, 200 + i),
                 _run("copy", "hf-lookup", i, 0.0, status=peer_on_copy),
                 _run("prose", "plain", i, 100 + i),
                 _run("prose", "calibrated", i, calibrated_on_prose * (100 + i)),
                 _run("prose", "hf-lookup", i, 100 + i)]
    return runs


def test_both_geometric_means_are_over_the_cells_both_measured() -> None:
    view = view_of_runs("x", "x", _matrix())
    (item,) = view.versus_peers
    assert (item.ours, item.peer, item.cells) == ("calibrated", "hf-lookup", 1)
    assert item.ours_speedup == pytest.approx(1.0) and item.ratio == pytest.approx(1.0)
    assert peer_headline(view, T) == [
        "Against peers: calibrated 1.00x hf-lookup (geometric-mean speed-ups over plain on "
        "the 1 cell both measured: calibrated 1.00x, hf-lookup 1.00x)"]  # was 1.41x


def test_a_cell_the_peer_measured_too_counts_on_both_sides() -> None:
    runs = [r for r in _matrix() if not (r.prompt_name == "copy" and r.arm == "hf-lookup")]
    runs += [_run("copy", "hf-lookup", i, 150.0 + i) for i in range(3)]
    (item,) = view_of_runs("x", "x", runs).versus_peers
    assert item.cells == 2
    assert item.ratio == pytest.approx((201 / 101) ** 0.5 / (151 / 101) ** 0.5)


def test_no_cell_in_common_is_said_not_given_a_ratio() -> None:
    # Our best arm loops on prose, the peer's one cell: nothing to compare them on.
    runs = [r for r in _matrix() if not (r.prompt_name == "prose" and r.arm == "calibrated")]
    runs += [_run("prose", "calibrated", i, 300.0, loop_share=0.9) for i in range(3)]
    view = view_of_runs("x", "x", runs)
    (item,) = view.versus_peers
    assert (item.cells, item.ratio) == (0, None)
    assert peer_headline(view, T) == [
        "Against peers: calibrated and hf-lookup measured no cell in common: no ratio (each "
        "headline above is over its own cells)"]


def test_plain_against_a_peer_is_over_every_cell_the_peer_measured() -> None:
    # Our one arm is slower than plain (0.40x): plain, 1x on the peer's one cell, is ours.
    view = view_of_runs("x", "x", [r for r in _matrix(calibrated_on_prose=0.4)
                                   if not (r.prompt_name == "copy" and r.arm == "calibrated")])
    (item,) = view.versus_peers
    assert (item.ours, item.cells, item.ours_speedup) == ("plain", 1, 1.0)
    assert item.ratio == pytest.approx(1.0)
