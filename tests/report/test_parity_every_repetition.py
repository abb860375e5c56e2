"""`parity`, `matrix show` and the record over every repetition: a later repeat of an arm that
replies otherwise than plain's first, or a plain whose own repeats differ (greedy decoding is
deterministic), read "identical" when only the first repetitions were compared; a speed-up of
a reply that is not plain's was averaged into the headline and `Against peers`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from specfleet.report.parity import PEER_DIFFERS, arm_parity, check_parity
from specfleet.report.parity_tables import render_parity
from specfleet.report.record import record_markdown
from specfleet.report.results import render_matrix
from specfleet.stats.view import group_runs
from specfleet.store import open_store
from tests.report.seed import repeats_matrix

T = "mac1/mlx/metal"
CLEAN, LATER, PLAIN_TWO_WAYS = "clean-000001", "later-000002", "plain-000003"
EARLY = "early-000004"


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('reps') / 's.db'}"
    with open_store(url) as store:
        repeats_matrix(store, CLEAN, {})
        # graded's repeat 1 and 2 on story leave plain's reply (as a tampered store did)
        repeats_matrix(store, LATER, {("story", "graded", 1): [5, 6, 9],
                                      ("story", "graded", 2): [5, 2, 7]})
        repeats_matrix(store, PLAIN_TWO_WAYS, {("story", "plain", 2): [5, 6, 8]})
        repeats_matrix(store, EARLY, {("story", "graded", 0): [5, 6, 9]})
    return url


@pytest.fixture()
def store(db):
    with open_store(db) as store:
        yield store


def _run(arm: str, tokens: list[int], repeat: int) -> SimpleNamespace:
    return SimpleNamespace(host="h", engine="torch", device="cpu", model="m", prompt_name="p",
                           arm=arm, repeat=repeat, status="done", token_ids=tokens,
                           output_text=None, temperature=0.0, seed=None)


def _arm(report, prompt: str, arm: str):
    (item,) = [a for a in report.arms if (a.prompt, a.arm) == (prompt, arm)]
    return item


def test_a_later_repeat_that_diverges_is_classified_with_its_repeat(store) -> None:
    calls = []

    def replayer(plain, arm_run, token):
        calls.append((plain.repeat, arm_run.repeat, token))
        return None  # not replayable here: unverified

    report = check_parity(store, LATER, replayer)
    graded = _arm(report, "story", "graded")
    assert (graded.verdict, graded.repeat, graded.token, graded.char, graded.replies) == (
        "unverified", 1, 2, 2, 3)
    assert calls == [(0, 1, 2)]  # one replay a cell: the first pair that differs
    assert graded.excerpt == "after 'ef': plain 'g' vs graded 'i'"
    assert _arm(report, "story", "gated").verdict == "identical"
    assert report.replies == 24 and report.failed()
    text = render_parity(report)
    assert ("Parity of later-000002 (every repetition, 24 replies compared): 5 identical, 0 "
            "near-tie, 0 suspect, 1 unverified; 6 of 6 pairs compared") in text
    assert "token 2 (char 2) in repeat 1" in text
    assert "(every repetition against plain's first)" in text


def test_a_plain_whose_repeats_differ_fails_and_is_named(store) -> None:
    report = check_parity(store, PLAIN_TWO_WAYS)
    (differs,) = report.plain_differs
    assert (differs.prompt, differs.repeat, differs.token, differs.char) == ("story", 2, 2, 2)
    assert report.count("identical") == 6  # every arm equals plain's first
    assert report.failed(allow_unverified=True)
    assert not check_parity(store, CLEAN).failed()
    text = render_parity(report)
    assert ("plain repeats differ at token 2 (char 2) in repeat 2 on mac1/mlx/metal m1 story "
            "(greedy plain decoding is not deterministic there; fails); 6 of 6 pairs "
            "compared") in text
    assert "Plain replies that differ between repetitions" in text
    body = json.loads(render_parity(report, "json"))
    assert body["plain_differs"][0]["repeat"] == 2
    csv_rows = render_parity(report, "csv").splitlines()
    assert csv_rows[-1].startswith("mac1/mlx/metal,m1,story,plain,plain repeats differ,2,2,")


def test_a_peer_is_compared_every_repeat_and_still_only_differs() -> None:
    groups = group_runs([_run("plain", [1, 2, 3], r) for r in range(3)]
                        + [_run("hf-lookup", [1, 2, 3], 0), _run("hf-lookup", [1, 2, 4], 1)])
    (item,) = arm_parity(groups, None, 0.1)
    assert (item.verdict, item.repeat, item.token) == (PEER_DIFFERS, 1, 2)


def test_matrix_show_marks_the_cell_and_keeps_it_out_of_the_headline(store) -> None:
    text = render_matrix(store, LATER)
    assert "diverges at token 2 (char 2) in repeat 1" in text
    assert ("Parity vs plain (every repetition, 24 replies compared): 5 identical, 1 diverged"
            in text)
    assert "1.99x ±1.0% gain ≠" in text
    # graded: 1.99x on edit_fn only; story's 1.99x measured another reply
    assert "Headline graded: 1.99x geometric mean over 1 cell (1 gain" in text
    assert "Kept out of the graded headline (reply ≠ plain): m1/story 1.99x" in text
    body = json.loads(render_matrix(store, LATER, "json"))
    graded = next(h for h in body["headlines"] if h["arm"] == "graded")
    assert (graded["cells"], graded["diverged_excluded"]) == (1, 1)
    assert "Kept out of the graded headline (reply ≠ plain): m1/story 1.99x" in body["headline"][T]
    story = next(c for c in body["cells"] if (c["prompt"], c["arm"]) == ("story", "graded"))
    assert (story["parity"], story["diverge_repeat"], story["parity_replies"]) == (
        "diverged", 1, 3)


def test_against_peers_is_over_the_headline_cells_only(store) -> None:
    body = json.loads(render_matrix(store, LATER, "json"))
    (line,) = [x for x in body["headline"][T] if x.startswith("Against peers")]
    # graded's story cell is not plain's reply: on edit_fn alone, 1.99x against 1.20x
    assert line == ("Against peers: graded 1.66x hf-lookup (geometric-mean speed-ups over plain "
                    "on the 1 cell both measured: graded 1.99x, hf-lookup 1.20x)")


def test_matrix_show_says_plain_repeats_differ(store) -> None:
    text = render_matrix(store, PLAIN_TWO_WAYS)
    counters = next(line for line in text.splitlines() if "repeats differ at" in line)
    assert "repeats differ at token 2 (char 2) in repeat 2" in counters
    assert "plain's own repetitions differ on 1 cell (greedy plain decoding is not " in text
    speedups = text.split("Prompt lookup over plain")[1].split("Headline")[0]
    (plain,) = [line for line in speedups.splitlines() if " plain " in line]
    assert plain.split() == ["m1", "plain", "1.00x", "±2.0%", "1.00x", "±2.0%", "≠"]


def test_the_record_says_what_parity_says(store) -> None:
    text = record_markdown(store, PLAIN_TWO_WAYS, [])
    parity = text.split("## Parity against plain", 1)[1].split("## Load", 1)[0]
    assert "## Plain replies that differ between repetitions" in parity
    assert "| mac1/mlx/metal | m1 | story | token 2 (char 2) in repeat 2 |" in parity
    later = record_markdown(store, LATER, [])
    assert "| mac1/mlx/metal | m1 | story | graded | diverges at token 2 (char 2) in repeat 1 |" \
        in later
    assert "Kept out of the graded headline (reply ≠ plain): m1/story 1.99x" in later


def test_a_regression_in_a_later_repeat_is_one(store) -> None:
    # Identical in the baseline means every repetition identical; so does "differs now".
    now = check_parity(store, LATER, baseline_id=CLEAN)
    assert [(r.prompt, r.arm, r.token, r.char) for r in now.regressions] == [
        ("story", "graded", 2, 2)]
    assert check_parity(store, CLEAN, baseline_id=LATER).regressions == ()
    # graded already differed there (in repeat 1): differing now in repeat 0 is no regression
    assert check_parity(store, EARLY, baseline_id=LATER).regressions == ()
