"""The verdict rules a mutation run found unstated (tools/mutations.py --group rules): a LOOP
plain keeps its arms' speed-ups out of the headline; `history` fails only on a slow-down
whose provenance matches the point before."""

from __future__ import annotations

from specfleet.stats.cells import summarize
from specfleet.stats.changes import detect_change
from specfleet.stats.history import HistoryRow, history_regressions


def runs(arm: str, rates: list[float], loop_share: float = 0.0) -> list[dict]:
    return [dict(target="h/torch/cpu", model="m", prompt_name="p", arm=arm, repeat=i,
                 tok_per_s=rate, status="done", loop_share=loop_share)
            for i, rate in enumerate(rates)]


def test_a_looping_plain_keeps_its_arms_speedup_out_of_the_headline() -> None:
    # The arm's reply left plain's cycle (it does not loop), plain's loops: the speed-up over
    # a looping baseline is a LOOP speed-up all the same, counted apart from the headline.
    summary = summarize(runs("plain", [10.0, 10.0, 10.0], loop_share=0.6)
                        + runs("graded", [30.0, 30.0, 30.0]))
    assert [c.looping for c in summary.cells] == [False, True]  # graded, plain
    assert summary.speedups == ()
    (up,) = summary.looping
    assert up.key.arm == "graded" and up.looping and up.verdict == "gain"
    (head,) = summary.headline
    assert (head.cells, head.gains, head.looping_excluded, head.geomean_speedup) == (0, 0, 1, None)


def point(target: str, values: list[float], before: list[float],
          differs: tuple[str, ...] = ()) -> HistoryRow:
    return HistoryRow(target=target, matrix_id="after", submitted_at="2026-12-06 18:00",
                      values=tuple(values), median_tok_per_s=values[1], spread=0.0,
                      speedup=None, loop=False, change=detect_change(before, values),
                      differs=differs)


def test_history_fails_on_a_slow_down_only_where_nothing_but_the_code_differs() -> None:
    before = [20.0, 20.5, 21.0]
    same = point("a/torch/cpu", [15.0, 15.5, 16.0], before)
    weights = point("b/torch/cpu", [15.0, 15.5, 16.0], before, differs=("weights hash",))
    assert same.change is not None and same.change.verdict == "slower"
    assert weights.change is not None and weights.change.verdict == "slower"
    assert history_regressions([same, weights]) == [same]


def test_history_compares_a_point_with_the_previous_one_of_its_token_limit() -> None:
    # A 48-token point between two 256-token ones hid their 30% slow-down: each was compared
    # with its neighbour in time ("differs in token limit"), and `history` exited 0.
    from datetime import datetime
    from types import SimpleNamespace

    from specfleet.stats.history import history_rows

    def matrix(matrix_id: str, limit: int, plain: float, graded: float) -> list:
        return [SimpleNamespace(host="h", engine="torch", device="cpu", matrix_id=matrix_id,
                                arm=arm, tok_per_s=rate + i * 0.1, max_tokens=limit,
                                loop_share=0.0, engine_config={}, versions={},
                                weights_hash="w", prompt_hash="p", host_fingerprint="f",
                                conditions=None)
                for arm, rate in (("plain", plain), ("graded", graded)) for i in range(3)]

    runs = (matrix("a", 256, 10.0, 20.0) + matrix("b", 48, 8.0, 17.0)
            + matrix("c", 256, 10.0, 14.0))
    when = {m: datetime(2026, 12, 1 + i) for i, m in enumerate("abc")}
    rows = history_rows(runs, "graded", when)
    assert [(r.max_tokens, r.matrix_id) for r in rows] == [(48, "b"), (256, "a"), (256, "c")]
    [newest] = history_regressions(rows)
    assert (newest.matrix_id, newest.max_tokens, round(newest.change.ratio, 2)) == ("c", 256, 0.7)
    assert newest.differs == ()  # within its series the limit never differs
