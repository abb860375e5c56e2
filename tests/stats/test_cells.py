"""Summaries on crafted rows: medians, spreads, speed-up verdicts, loop flags, parity, headline."""

from __future__ import annotations

import math

import pytest

from specfleet.jobs.run import RunResult, Target
from specfleet.stats.cells import (
    LOOP_SHARE_FLAG,
    SPREAD_FLAG,
    cell_stats,
    cross_target_parity,
    first_divergence,
    geomean,
    noise_verdict,
    parity_verdicts,
    relative_spread,
    summarize,
)
from specfleet.stats.interval import RatioInterval
from specfleet.stats.runs import CellKey

T = "h/torch/cpu"


def runs(arm: str, rates: list[float], prompt: str = "p", target: str = T, **extra) -> list[dict]:
    return [dict(target=target, model="m", prompt_name=prompt, arm=arm, repeat=i, tok_per_s=r,
                 status="done", **extra) for i, r in enumerate(rates)]


def key(arm: str, prompt: str = "p", target: str = T) -> CellKey:
    return CellKey(target, "m", prompt, arm)


def test_cell_median_min_max_spread_n_and_flag() -> None:
    rows = runs("plain", [10.0, 12.0, 10.4]) + runs("graded", [20.0, 20.5, 20.2])
    cells = {c.key.arm: c for c in cell_stats(rows)}
    plain, graded = cells["plain"], cells["graded"]
    assert (plain.n, plain.median_tok_per_s, plain.min_tok_per_s, plain.max_tok_per_s) == (
        3, 10.4, 10.0, 12.0)
    assert plain.values == (10.0, 12.0, 10.4)
    assert plain.spread == pytest.approx(2.0 / 10.4)
    assert plain.spread_flag and not graded.spread_flag  # 19% vs 2.5%
    assert graded.spread == pytest.approx(0.5 / 20.2)


def test_spread_flag_threshold_is_strictly_above_five_percent() -> None:
    assert SPREAD_FLAG == 0.05
    cells = {c.key.arm: c for c in cell_stats(runs("plain", [95.0, 100.0, 100.0]) +
                                              runs("gated", [94.0, 100.0, 100.0]))}
    assert cells["plain"].spread == pytest.approx(0.05) and not cells["plain"].spread_flag
    assert cells["gated"].spread_flag


def test_failed_runs_are_counted_not_measured() -> None:
    rows = runs("plain", [10.0, 11.0]) + [dict(target=T, model="m", prompt_name="p",
                                               arm="plain", tok_per_s=0.0, status="failed")]
    (cell,) = cell_stats(rows)
    assert (cell.n, cell.n_failed, cell.median_tok_per_s) == (2, 1, 10.5)
    (empty,) = cell_stats([dict(target=T, model="m", prompt="p", arm="gated", status="failed")])
    assert (empty.n, empty.median_tok_per_s, empty.spread) == (0, None, None)


def test_speedups_and_verdicts() -> None:
    rows = (runs("plain", [10.0, 10.5, 10.2]) + runs("graded", [15.0, 15.3, 15.1])
            + runs("gated", [10.4, 10.3, 10.5]) + runs("fixed", [8.0, 8.1, 7.9]))
    summary = summarize(rows)
    ups = {u.key.arm: u for u in summary.speedups}
    assert ups["graded"].ratio == pytest.approx(15.1 / 10.2)
    assert ups["graded"].interval == RatioInterval(15.0 / 10.5, 15.3 / 10.0, 0.9)
    assert ups["graded"].plain_median_tok_per_s == 10.2
    # gated: 10.4/10.2, but 10.3 and 10.4 are slower than plain's 10.5: the interval holds 1
    assert [ups[a].verdict for a in ("graded", "gated", "fixed")] == [
        "gain", "within noise", "loss"]
    counts = {h.arm: (h.gains, h.losses, h.within_noise, h.no_verdict) for h in summary.headline}
    assert counts == {"graded": (1, 0, 0, 0), "gated": (0, 0, 1, 0), "fixed": (0, 1, 0, 0)}


def test_a_wide_arm_spread_outside_plains_spread_is_within_noise() -> None:
    """0.97x at ±14.7% against plain's ±2.9% (MLX `story`): plain's spread alone called it
    a loss; the interval over both sides' repeats holds 1."""
    summary = summarize(runs("plain", [100.0, 101.5, 98.6]) + runs("graded", [90.0, 97.0, 104.3])
                        + runs("gated", [96.5, 97.0, 97.5]))
    ups = {u.key.arm: u for u in summary.speedups}
    assert ups["graded"].ratio == pytest.approx(0.97)
    assert (ups["graded"].verdict, ups["gated"].verdict) == ("within noise", "loss")
    assert noise_verdict(ups["graded"].interval) == "within noise"


def test_under_three_repeats_a_speedup_has_no_verdict() -> None:
    summary = summarize(runs("plain", [10.0]) + runs("graded", [7.7])
                        + runs("gated", [15.0, 15.2, 15.1]))
    ups = {u.key.arm: u for u in summary.speedups}
    assert (ups["graded"].verdict, ups["graded"].n) == ("no verdict", 1)  # 0.77x: no "loss"
    assert ups["gated"].verdict == "no verdict"  # plain has one repeat
    assert ups["gated"].interval is None
    (headline,) = [h for h in summary.headline if h.arm == "graded"]
    assert (headline.losses, headline.no_verdict) == (0, 1)
    assert noise_verdict(None) == "no verdict"


def test_looping_cells_are_apart_from_the_headline_never_dropped() -> None:
    assert LOOP_SHARE_FLAG == 0.2
    rows = (runs("plain", [10.0, 10.0, 10.0], prompt="ok")
            + runs("graded", [20.0, 20.0, 20.0], prompt="ok")
            + runs("plain", [10.0, 10.0, 10.0], prompt="loopy", loop_share=0.6)
            + runs("graded", [40.0, 40.0, 40.0], prompt="loopy", loop_share=0.6)
            + runs("plain", [10.0, 10.0, 10.0], prompt="edge", loop_share=0.2)
            + runs("graded", [5.0, 5.0, 5.0], prompt="edge", loop_share=0.2))
    summary = summarize(rows)
    assert [u.key.prompt for u in summary.looping] == ["loopy"]
    assert sorted(u.key.prompt for u in summary.speedups) == ["edge", "ok"]  # 0.2 is not above
    looping_cells = {c.key for c in summary.cells if c.looping}
    assert looping_cells == {key("plain", "loopy"), key("graded", "loopy")}
    (head,) = summary.headline
    assert head.geomean_speedup == pytest.approx(math.sqrt(2.0 * 0.5))
    assert (head.cells, head.gains, head.losses, head.looping_excluded) == (2, 1, 1, 1)


def test_loop_share_is_the_median_of_the_runs() -> None:
    rows = [dict(target=T, model="m", prompt="p", arm="plain", tok_per_s=1.0, loop_share=s)
            for s in (0.9, 0.1, 0.15)]
    (cell,) = cell_stats(rows)
    assert cell.loop_share == 0.15 and not cell.looping


def test_headline_geomean_per_target_and_arm() -> None:
    rows = []
    for target, prompt, rate in [(T, "a", 20.0), (T, "b", 5.0), ("g/mlx/cuda", "a", 30.0)]:
        rows += runs("plain", [10.0], prompt, target) + runs("gated", [rate], prompt, target)
    heads = {(h.target, h.arm): h for h in summarize(rows).headline}
    assert heads[(T, "gated")].geomean_speedup == pytest.approx(1.0)
    assert heads[("g/mlx/cuda", "gated")].geomean_speedup == pytest.approx(3.0)
    assert geomean([]) is None and geomean([4.0, 1.0]) == pytest.approx(2.0)


def test_first_divergence() -> None:
    assert first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert first_divergence([1, 2], [1, 2, 3]) == 2
    assert first_divergence("abc", "abd") == 2
    assert first_divergence([], []) is None


def test_parity_token_and_character_index() -> None:
    rows = (runs("plain", [10.0, 10.0], token_ids=[5, 6, 7, 8], output_text="Hi there you")
            + runs("graded", [12.0], token_ids=[5, 6, 9, 8], output_text="Hi there, you")
            + runs("gated", [12.0], token_ids=[5, 6, 7, 8], output_text="Hi there you")
            + runs("fixed", [12.0], token_ids=[5, 6], output_text="Hi there"))
    verdicts = {v.key.arm: v for v in parity_verdicts(rows)}
    graded = verdicts["graded"]
    assert (graded.status, graded.token_index, graded.char_index) == ("diverged", 2, 8)
    assert (graded.reference_token, graded.candidate_token) == (7, 9)
    assert graded.reference == key("plain")
    assert verdicts["gated"].status == "identical"
    fixed = verdicts["fixed"]
    assert (fixed.status, fixed.token_index, fixed.char_index) == ("diverged", 2, 8)
    assert (fixed.reference_token, fixed.candidate_token) == (7, None)


def test_parity_skips_a_failed_repetition_and_reports_missing() -> None:
    rows = (runs("plain", [10.0], token_ids=[1, 2])
            + [dict(target=T, model="m", prompt="p", arm="graded", repeat=0, status="failed",
                    token_ids=[9])]
            + [dict(target=T, model="m", prompt="p", arm="graded", repeat=1, tok_per_s=1.0,
                    token_ids=[1, 2])]
            + runs("gated", [10.0], prompt="q", token_ids=[1]))
    verdicts = {(v.key.prompt, v.key.arm): v.status for v in parity_verdicts(rows)}
    assert verdicts == {("p", "graded"): "identical", ("p", "plain"): "identical",
                        ("q", "gated"): "missing"}


def test_parity_pairs_an_arm_with_plain_of_its_own_matrix() -> None:
    # `results --cells` pools matrices: a 16-token reply against another matrix's 40-token
    # plain reply read as a divergence that `parity` (per matrix) never saw.
    long, short = list(range(1, 41)), list(range(1, 17))
    rows = (runs("plain", [10.0], token_ids=long, matrix_id="b")
            + runs("plain", [10.0], token_ids=short, matrix_id="a")
            + runs("graded", [12.0], token_ids=short, matrix_id="a"))
    # Each plain reply is held to its own matrix's first too: pooled plains are no pair.
    assert {v.key.arm: v.status for v in parity_verdicts(rows)} == {
        "graded": "identical", "plain": "identical"}


def test_parity_by_text_when_token_ids_are_absent() -> None:
    rows = runs("plain", [1.0], output_text="abcdef") + runs("gated", [1.0], output_text="abcxef")
    (verdict,) = [v for v in parity_verdicts(rows) if v.key.arm == "gated"]
    assert (verdict.status, verdict.token_index, verdict.char_index) == ("diverged", None, 3)


def test_cross_target_parity_of_plain_replies() -> None:
    rows = (runs("plain", [1.0], target="a/mlx/cpu", token_ids=[1, 2, 3])
            + runs("plain", [1.0], target="b/torch/cpu", token_ids=[1, 2, 3])
            + runs("plain", [1.0], target="c/mlx/metal", token_ids=[1, 4, 3])
            + runs("graded", [1.0], target="c/mlx/metal", token_ids=[7]))
    verdicts = {v.key.target: v for v in cross_target_parity(rows)}
    assert set(verdicts) == {"b/torch/cpu", "c/mlx/metal"}
    assert verdicts["b/torch/cpu"].status == "identical"
    assert verdicts["c/mlx/metal"].token_index == 1
    assert verdicts["c/mlx/metal"].reference.target == "a/mlx/cpu"


@pytest.mark.parametrize(("stop_reason", "status", "index"), [
    ("max_tokens", "identical", None),  # a shorter token limit on one target is no divergence
    ("eos", "diverged", 2),  # stopping early on EOS where the other went on is one
])
def test_cross_target_parity_compares_a_reply_cut_at_its_limit_over_its_length(
    stop_reason: str, status: str, index: int | None,
) -> None:
    rows = (runs("plain", [1.0], target="a/mlx/cpu", token_ids=[1, 2], output_text="ab",
                 stop_reason=stop_reason)
            + runs("plain", [1.0], target="b/torch/cpu", token_ids=[1, 2, 3, 4],
                   output_text="abcd", stop_reason="max_tokens"))
    (verdict,) = cross_target_parity(rows)
    assert (verdict.status, verdict.token_index) == (status, index)


def test_accepts_run_result_like_objects() -> None:
    class Joined(RunResult):
        model: str
        prompt_name: str
        arm: str
        repeat: int

    target = Target(host="h", engine="torch", device="cpu")
    rows = [Joined(run_key=f"k{i}", status="done", target=target, model="m", prompt_name="p",
                   arm=arm, repeat=0, tok_per_s=rate, rounds=10, drafted_rounds=4,
                   proposed=20, accepted=15, generated_tokens=31, token_ids=[1, 2])
            for i, (arm, rate) in enumerate([("plain", 10.0), ("gated", 14.0)])]
    summary = summarize(rows)
    (up,) = summary.speedups
    assert up.key == key("gated") and up.ratio == pytest.approx(1.4)
    counters = summary.cells[0].counters
    assert (counters.acceptance_rate, counters.tokens_per_forward) == (0.75, 3.0)
    assert summary.parity[0].status == "identical"


def test_relative_spread() -> None:
    assert relative_spread([5.0]) == 0.0
    assert relative_spread([9.0, 11.0, 10.0]) == pytest.approx(0.2)


def test_our_best_arm_against_the_best_peer_per_target() -> None:
    from specfleet.stats.cells import Headline, versus_peers

    def head(target: str, arm: str, geomean: float | None) -> Headline:
        ratios = () if geomean is None else (("m", "p", geomean),)  # one cell, both arms
        return Headline(target, arm, geomean, 1, 0, 0, 1, 0, ratios=ratios)

    found = versus_peers([
        head("a/torch/cpu", "graded", 1.5), head("a/torch/cpu", "gated", 1.2),
        head("a/torch/cpu", "hf", 0.9), head("a/torch/cpu", "hf-lookup", 1.25),
        head("b/torch/cpu", "graded", 0.8), head("b/torch/cpu", "hf-lookup", 1.6),
        head("c/mlx/cpu", "graded", 1.1), head("c/mlx/cpu", "mlx-lm", None),
    ])
    assert [(p.target, p.ours, p.peer) for p in found] == [
        ("a/torch/cpu", "graded", "hf-lookup"), ("b/torch/cpu", "plain", "hf-lookup")]
    assert found[0].ratio == pytest.approx(1.2) and found[1].ratio == pytest.approx(1 / 1.6)
    assert [p.cells for p in found] == [1, 1]


def test_parity_of_runs_sampled_without_a_seed_is_no_verdict() -> None:
    # `matrix show` marked the cell `≠` ("diverges at token 0") where `parity` says each run
    # draws anew: nothing to compare. A seeded pair is compared draw for draw.
    unseeded = (runs("plain", [1.0], token_ids=[1, 2], temperature=0.8)
                + runs("graded", [1.0], token_ids=[3, 2], temperature=0.8))
    assert [v.status for v in parity_verdicts(unseeded)] == ["missing", "missing"]
    seeded = (runs("plain", [1.0], token_ids=[1, 2], temperature=0.8, seed=3)
              + runs("graded", [1.0], token_ids=[3, 2], temperature=0.8, seed=3))
    assert {v.key.arm: v.status for v in parity_verdicts(seeded)} == {
        "graded": "diverged", "plain": "identical"}
