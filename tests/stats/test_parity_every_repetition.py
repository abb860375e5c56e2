"""Parity holds every repetition to plain's first, and plain's to each other: a matrix whose
second repeat of `graded` (and of plain) replied otherwise read "15 identical" because only
the first repetitions were compared."""

from __future__ import annotations

from specfleet.stats.cells import parity_verdicts, summarize

T = "h/torch/cpu"
REPLY = [5, 6, 7, 8]


def runs(arm: str, replies: list[list[int]], prompt: str = "p", rate: float = 10.0,
         **extra) -> list[dict]:
    return [dict(target=T, model="m", prompt_name=prompt, arm=arm, repeat=i, tok_per_s=rate,
                 status="done", token_ids=tokens, output_text="".join(map(chr, tokens)), **extra)
            for i, tokens in enumerate(replies)]


def _by_arm(rows) -> dict:
    return {v.key.arm: v for v in parity_verdicts(rows)}


def test_a_later_repetition_that_diverges_makes_the_cell_diverge() -> None:
    rows = (runs("plain", [REPLY] * 3) + runs("graded", [REPLY, REPLY, [5, 6, 9, 8]])
            + runs("gated", [REPLY] * 3))
    verdicts = _by_arm(rows)
    graded = verdicts["graded"]
    assert (graded.status, graded.repeat, graded.token_index, graded.char_index) == (
        "diverged", 2, 2, 2)
    assert (graded.reference_token, graded.candidate_token, graded.replies) == (7, 9, 3)
    assert (verdicts["gated"].status, verdicts["gated"].replies) == ("identical", 3)


def test_the_first_differing_repetition_is_the_one_said() -> None:
    rows = runs("plain", [REPLY] * 3) + runs("graded", [REPLY, [5, 1, 7, 8], [5, 6, 9, 8]])
    graded = _by_arm(rows)["graded"]
    assert (graded.repeat, graded.token_index) == (1, 1)


def test_plain_repetitions_that_differ_are_a_plain_verdict_of_their_own() -> None:
    # Greedy plain decoding replies alike every time: one that does not is no reference.
    rows = runs("plain", [REPLY, [5, 6, 3, 8], REPLY]) + runs("graded", [REPLY] * 3)
    verdicts = _by_arm(rows)
    plain = verdicts["plain"]
    assert (plain.status, plain.repeat, plain.token_index, plain.replies) == ("diverged", 1, 2, 3)
    assert plain.reference == plain.key
    assert verdicts["graded"].status == "identical"  # held to plain's first, which it equals


def test_seeded_replies_are_held_draw_for_draw_every_repetition_unseeded_ones_not() -> None:
    seeded = runs("plain", [REPLY] * 2, temperature=0.8, seed=3) + runs(
        "graded", [REPLY, [5, 6, 7, 1]], temperature=0.8, seed=3)
    assert (_by_arm(seeded)["graded"].status, _by_arm(seeded)["graded"].repeat) == ("diverged", 1)
    unseeded = runs("plain", [REPLY] * 2, temperature=0.8) + runs(
        "graded", [REPLY, [5, 6, 7, 1]], temperature=0.8)
    assert {v.status for v in parity_verdicts(unseeded)} == {"missing"}


def test_a_diverged_arm_is_kept_out_of_the_headline_a_peer_is_not() -> None:
    rows = (runs("plain", [REPLY] * 3, "a") + runs("plain", [REPLY] * 3, "b")
            + runs("graded", [REPLY] * 3, "a", rate=20.0)
            + runs("graded", [REPLY, REPLY, [5, 6, 9, 8]], "b", rate=40.0)
            + runs("hf-lookup", [REPLY] * 3, "a", rate=15.0)
            + runs("hf-lookup", [[1, 2, 3, 4]] * 3, "b", rate=15.0))
    summary = summarize(rows)
    heads = {h.arm: h for h in summary.headline}
    graded, peer = heads["graded"], heads["hf-lookup"]
    # 4.00x on b measured another reply: 2.00x over a alone, b counted apart
    assert (graded.geomean_speedup, graded.cells, graded.diverged_excluded) == (2.0, 1, 1)
    assert graded.ratios == (("m", "a", 2.0),)
    assert [(u.key.prompt, u.key.arm) for u in summary.diverged] == [("b", "graded")]
    assert ("b", "graded") not in {(u.key.prompt, u.key.arm) for u in summary.speedups}
    # A peer's differing reply is another library's decoding: it stays in its headline.
    assert (peer.cells, peer.diverged_excluded) == (2, 0)
