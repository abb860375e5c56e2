"""Parity verdicts on a seeded store: replayed on the real toy engine through a HostWorker."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from specfleet.cluster.forensics import worker_replayer
from specfleet.engine.forensics import PathRow, Replay, RowMargins
from specfleet.errors import UserError
from specfleet.report.coverage import Coverage
from specfleet.report.parity import baseline_coverage, check_parity
from specfleet.report.parity_tables import render_parity
from specfleet.stats.runs import CellKey
from tests.report.conftest import AFTER_ID, DEMO_ID


def run(arm: str, tokens: list[int], temperature: float = 0.0, seed: int | None = None,
        repeat: int = 0) -> SimpleNamespace:
    """A stored run as parity reads it."""
    return SimpleNamespace(host="h", engine="torch", device="cpu", model="m", prompt_name="p",
                           arm=arm, repeat=repeat, status="done", token_ids=tokens,
                           output_text=None, temperature=temperature, seed=seed, plan_order=0)


def _by_cell(report):
    return {(a.target, a.model, a.prompt, a.arm): a for a in report.arms}


def test_divergence_is_replayed_and_suspect(store, worker) -> None:
    report = check_parity(store, DEMO_ID, worker_replayer(store, {"h1": worker}, worker))
    item = _by_cell(report)[("h2/toy/cpu", "script", "copy", "graded")]
    assert (item.verdict, item.token, item.char) == ("suspect", 5, 5)
    margins = item.replay.margins
    # the script model puts 10 on its token: the patched 'Z' loses by 10 logits on both paths
    assert (margins.token_a, margins.token_b) == (ord(" "), ord("Z"))
    assert margins.a.gap == pytest.approx(10.0) and margins.b.gap == pytest.approx(-10.0)
    assert margins.b.width == 5
    assert (item.replay.text_a, item.replay.text_b) == (" ", "Z")
    assert report.count("identical") == 8 and report.count("suspect") == 1
    assert report.failed()


def test_cross_target_plain_replies(store) -> None:
    report = check_parity(store, DEMO_ID)
    cross = {(c.model, c.prompt): c for c in report.cross}
    assert cross[("script", "copy")].agree
    echo = cross[("script", "echo")]
    assert not echo.agree and (echo.token, echo.char) == (3, 3)
    assert (echo.target_a, echo.target_b) == ("h1/toy/cpu", "h2/toy/cpu")


def test_without_a_worker_the_divergence_is_unverified(store) -> None:
    report = check_parity(store, DEMO_ID, worker_replayer(store, {}))
    assert report.count("unverified") == 1 and report.count("suspect") == 0
    assert report.failed() and not report.failed(allow_unverified=True)


def _near_tie_replayer(plain, run, row):
    a = PathRow(((32, 7.0), (90, 6.95)), 0.05, 0.05, 1)
    b = PathRow(((90, 7.01), (32, 6.99)), 0.02, 0.02, 8)
    return Replay(RowMargins(row, 32, 90, a, b), " ", "Z")


def test_small_gaps_on_both_paths_are_a_near_tie(store) -> None:
    report = check_parity(store, DEMO_ID, _near_tie_replayer)
    assert report.count("near-tie") == 1 and not report.failed()
    assert check_parity(store, DEMO_ID, _near_tie_replayer, threshold=0.01).count("suspect") == 1


def test_baseline_regressions(store, worker) -> None:
    replayer = worker_replayer(store, {}, worker)
    report = check_parity(store, AFTER_ID, replayer, baseline_id=DEMO_ID)
    assert [(r.target, r.prompt, r.arm, r.token) for r in report.regressions] == [
        ("h1/toy/cpu", "copy", "gated", 5)
    ]
    assert report.failed()
    assert report.baseline_coverage == Coverage(9, 9, "pairs") and not report.baseline_missing
    # h2 copy graded diverged in the demo and is identical now: an improvement, not a regression
    back = check_parity(store, DEMO_ID, replayer, baseline_id=AFTER_ID)
    assert [(r.target, r.arm) for r in back.regressions] == [("h2/toy/cpu", "graded")]


def test_baseline_coverage_counts_our_pairs_found_there_not_peers() -> None:
    def run(target: str, arm: str) -> SimpleNamespace:
        return SimpleNamespace(target=target, model="m", prompt_name="p", arm=arm)

    runs = [run("a/torch/cpu", arm) for arm in ("plain", "graded", "gated", "hf")]
    greedy = SimpleNamespace(temperature=0.0, seed=None)  # a baseline run as parity reads it
    both = {CellKey("a/torch/cpu", "m", "p", arm): [greedy] for arm in ("plain", "graded")}
    found, missing = baseline_coverage(runs, both)
    # gated never ran there; hf, a peer arm, is never a regression and is not asked for
    assert found == Coverage(1, 2, "pairs") and missing == [("a/torch/cpu", "m", "p", "gated")]
    no_plain = {CellKey("a/torch/cpu", "m", "p", "graded"): [greedy]}
    assert baseline_coverage(runs, no_plain)[0] == Coverage(0, 2, "pairs")


def test_unknown_baseline_is_a_user_error(store) -> None:
    with pytest.raises(UserError, match="missing-1"):
        check_parity(store, DEMO_ID, baseline_id="missing-1")


def test_render_table_and_json(store, worker) -> None:
    report = check_parity(store, AFTER_ID, worker_replayer(store, {}, worker), DEMO_ID)
    text = render_parity(report)
    assert "Parity of after-000002 (every repetition, 42 replies compared): 8 identical, " \
           "0 near-tie, 1 suspect, 0 unverified; 1 regression against demo-000001" in text
    assert "plain ' ' vs gated 'Q'; gap +10.0000" in text
    assert "Regressions against baseline demo-000001" in text
    # Against itself nothing regressed: the summary says 0, with no empty table below it.
    clean = render_parity(check_parity(store, DEMO_ID, worker_replayer(store, {}, worker),
                                       DEMO_ID))
    assert "0 regressions against demo-000001" in clean
    assert "Regressions against baseline" not in clean
    body = json.loads(render_parity(report, "json"))
    assert body["regressions"][0]["arm"] == "gated"
    assert render_parity(report, "markdown").startswith("## Parity")
    csv_lines = render_parity(report, "csv").splitlines()
    assert csv_lines[0].startswith("target,model,prompt,arm,") and len(csv_lines) == 10
    with pytest.raises(UserError):
        render_parity(report, "xml")


def test_a_peer_that_differs_from_plain_is_reported_and_passes() -> None:

    from specfleet.report.parity import PEER_DIFFERS, ParityReport, arm_parity
    from specfleet.report.parity_tables import summary_line
    from specfleet.stats.view import group_runs

    groups = group_runs([run("plain", [1, 2, 3]), run("hf-lookup", [1, 2, 4]),
                         run("hf", [1, 2, 3])])
    items = {a.arm: a for a in arm_parity(groups, None, 0.1)}
    assert (items["hf-lookup"].verdict, items["hf-lookup"].token) == (PEER_DIFFERS, 2)
    assert items["hf"].verdict == "identical"
    report = ParityReport("m", 0.1, tuple(items.values()), ())
    assert not report.failed()  # information, not our failure: never replayed, never unverified
    assert summary_line(report).endswith("0 unverified, 1 peer differs (a peer arm; passes)")


def test_runs_sampled_without_a_seed_are_not_compared_and_say_why() -> None:
    # Each draws anew: they read `suspect` with a greedy logit gap, and failed CI falsely.
    from specfleet.report.parity import arm_parity, uncompared_pairs
    from specfleet.stats.view import group_runs

    runs = [run("plain", [1, 2, 3], 0.8), run("graded", [4, 2, 3], 0.8)]
    assert arm_parity(group_runs(runs), None, 0.1) == []
    (gap,) = uncompared_pairs(runs, set())
    assert gap.why.startswith("sampled at temperature 0.8 without a seed: each run draws anew")


def test_runs_sampled_with_a_seed_are_compared_draw_for_draw_not_replayed() -> None:
    from specfleet.report.parity import arm_parity
    from specfleet.stats.view import group_runs

    def never(*args):
        raise AssertionError("a sampled divergence was replayed greedily")

    same = group_runs([run("plain", [1, 2, 3], 0.8, 7), run("graded", [1, 2, 3], 0.8, 7)])
    assert [a.verdict for a in arm_parity(same, never, 0.1)] == ["identical"]
    apart = group_runs([run("plain", [1, 2, 3], 0.8, 7), run("graded", [1, 5, 3], 0.8, 7)])
    ((verdict, token),) = [(a.verdict, a.token) for a in arm_parity(apart, never, 0.1)]
    assert (verdict, token) == ("suspect", 1)


def test_a_baseline_sampled_without_a_seed_holds_no_pair() -> None:
    # Its pairs counted as found: `parity --baseline` passed against a baseline whose own
    # check fails for want of evidence.
    from specfleet.report.parity import baseline_coverage
    from specfleet.stats.view import group_runs

    now = [run("plain", [1, 2]), run("graded", [1, 2])]
    drew = group_runs([run("plain", [1, 2], 0.8), run("graded", [3, 2], 0.8)])
    seeded = group_runs([run("plain", [1, 2], 0.8, 7), run("graded", [1, 2], 0.8, 7)])
    assert baseline_coverage(now, drew)[0] == Coverage(0, 1, "pairs")
    assert baseline_coverage(now, seeded)[0] == Coverage(1, 1, "pairs")
