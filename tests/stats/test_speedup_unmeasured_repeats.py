"""A speed-up over repeats some of which have no rate (`--rate decode`: a sampled reply of one
token has no decode rate, 0.0, "not measured"): the verdict rests on the measured repeats,
and under 3 of them a side it says `n=2, no verdict`, never a speed-up with no mark at all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specfleet.report.tables import speedup_text
from specfleet.stats import view_of_runs


def _run(arm: str, repeat: int, generated: int, decode_s: float) -> SimpleNamespace:
    return SimpleNamespace(host="h", engine="toy", device="cpu", model="m", prompt_name="p",
                           arm=arm, repeat=repeat, tok_per_s=10.0, status="done",
                           generated_tokens=generated, decode_s=decode_s)


def test_a_repeat_without_a_decode_rate_counts_as_no_repeat() -> None:
    plain = [_run("plain", i, 11, 1.0) for i in range(3)]  # 10 tok/s each
    arm = [_run("graded", 0, 1, 0.0)] + [_run("graded", i, 11, 0.5) for i in (1, 2)]  # 20
    cell = view_of_runs("x", "x", plain + arm, rate="decode").cell("h/toy/cpu", "m", "p",
                                                                   "graded")
    assert cell is not None and cell.verdict == "no verdict" and cell.no_verdict_n == 2
    assert "n=2, no verdict" in speedup_text(cell)  # was "2.00x ±100.0%!", no mark

    arm.append(_run("graded", 3, 11, 0.55))  # a third measured repeat: 18.2 tok/s
    cell = view_of_runs("x", "x", plain + arm, rate="decode").cell("h/toy/cpu", "m", "p",
                                                                   "graded")
    assert cell is not None and cell.verdict == "gain" and cell.no_verdict_n is None
    assert cell.speedup_low == pytest.approx((10 / 0.55) / 10.0)
