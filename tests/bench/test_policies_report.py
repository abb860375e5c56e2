"""The policy benchmark's record (`bench/policies_report.py`): its targets judged by the
interval rule on synthetic repeats with a known answer, and the spread it prints."""

from __future__ import annotations

from types import SimpleNamespace

from bench import policies
from bench.policies_report import _misses, render_markdown
from specfleet.stats.interval import MIN_REPEATS

PLAIN = [100.0, 100.2, 100.4, 100.6, 100.8, 101.0, 101.2]
SAME = [99.9, 100.3, 100.5, 100.7, 100.9, 101.1, 101.3]  # interleaved with PLAIN: no loss


def scaled(rates: list[float], factor: float) -> list[float]:
    return [r * factor for r in rates]


def test_calibrated_a_little_under_the_better_median_within_noise_is_not_a_miss():
    # Medians 100.6 against 100.7: judged on them alone this was a miss; the repeats overlap.
    rates = {"plain": PLAIN, "graded": SAME, "gated": PLAIN, "calibrated": PLAIN}
    assert _misses("torch", "edit_fn", "copy", rates) == ["ok torch edit_fn"]


def test_calibrated_wholly_below_the_better_of_graded_and_gated_is_a_miss():
    rates = {"plain": PLAIN, "graded": SAME, "gated": scaled(SAME, 0.9),
             "calibrated": scaled(PLAIN, 0.95)}
    (line,) = _misses("torch", "edit_fn", "copy", rates)
    assert line.startswith("below torch edit_fn: calibrated 0.95x below graded 1.00x "
                           "(calibrated / graded: 90% interval 0."), line
    assert line.endswith("x, wholly below 1x)"), line


def test_prose_misses_only_when_the_interval_lies_wholly_below_point_nine_nine():
    # 0.985x plain by the medians (a miss when judged on them), the repeats overlapping 0.99x.
    overlapping = [r * 0.985 for r in [99.0, 100.0, 100.4, 101.0, 101.6, 102.0, 103.0]]
    slower = scaled(PLAIN, 0.8)  # graded and gated: that target is met
    rates = {"plain": PLAIN, "graded": slower, "gated": slower, "calibrated": overlapping}
    assert _misses("torch", "story", "prose", rates) == ["ok torch story"]
    # Every repeat 0.2-1% under every plain one: a loss against 1x, not against 0.99x.
    slightly = [100.0 * 0.99 + 0.1 * i for i in range(7)]  # 99.0 .. 99.6 against 100 .. 101.2
    rates = {**rates, "calibrated": slightly, "graded": PLAIN, "gated": PLAIN}
    lines = _misses("torch", "story", "prose", rates)
    assert [m.split(":")[0] for m in lines] == ["below torch story"]
    rates["calibrated"] = scaled(PLAIN, 0.95)
    (miss, below) = _misses("torch", "story", "prose", rates)
    assert miss.startswith("torch story: calibrated 0.95x below 0.99x plain (calibrated / "
                           "plain: 90% interval "), miss
    assert miss.endswith(", wholly below 0.99x)") and below.startswith("below "), miss


def test_copy_prompts_miss_against_transformers_lookup_only_when_wholly_below():
    rates = {"plain": PLAIN, "graded": PLAIN, "gated": PLAIN, "calibrated": scaled(PLAIN, 2.0),
             "hf_lookup10": scaled(SAME, 2.0)}
    assert _misses("torch", "edit_fn", "copy", rates) == ["ok torch edit_fn"]
    rates["hf_lookup10"] = scaled(SAME, 2.5)
    (miss, ok) = _misses("torch", "edit_fn", "copy", rates)
    assert miss.startswith("torch edit_fn: calibrated 2.00x below transformers lookup 2.50x "
                           "(calibrated / hf_lookup10: 90% interval"), miss
    assert ok == "ok torch edit_fn"


def test_too_few_repeats_give_no_verdict_not_a_miss():
    few = PLAIN[: MIN_REPEATS - 1]
    rates = {"plain": few, "graded": few, "gated": few, "calibrated": scaled(few, 0.5)}
    assert _misses("torch", "story", "prose", rates) == [
        f"unjudged torch story: calibrated against 0.99x plain (n={len(few)}, no verdict)",
        f"unjudged torch story: calibrated against graded (n={len(few)}, no verdict)"]


def run(rate: float) -> dict:
    """One repeat of `rate` tok/s: 10 tokens over 10 / rate seconds."""
    return {"tokens": list(range(10)), "total_s": 10 / rate, "counters": {}}


def test_the_record_prints_the_whole_range_and_judges_its_targets_by_the_interval():
    arms = {"plain": PLAIN, "graded": SAME, "gated": PLAIN,
            "calibrated": [100.0, 100.0, 100.0, 104.0, 104.0, 104.0, 104.0]}
    data = {"engine": "torch", "model": "m", "calibrate_s": 1.0, "pipelines": False,
            "table": {"ratio": [1.0, 1.5], "lo": [0.9, 1.4], "hi": [1.1, 1.6], "n": 3,
                      "flagged": []},
            "arms": {arm: {"story": [run(r) for r in rates]} for arm, rates in arms.items()}}
    text = render_markdown(
        [data], {"cpus": "2"}, "python bench/policies.py", SimpleNamespace(repeats=7, tokens=10),
        lambda *_: dict.fromkeys(policies.POLICIES, 1.0), policies.median_rate, policies.spread,
        lambda *_: {"ceiling": 1.0, **dict.fromkeys(policies.POLICIES, 1.0)})
    assert "± is the arm's whole max-min range over its median, as in the matrix tables" in text
    assert ("Width costs (torch, quick calibration, n=3 rounds, 1 s; median [lowest-highest "
            "round], a range, not an interval): w1=1.00 [0.90-1.10] w2=1.50 [1.40-1.60]") in text
    # calibrated: (104 - 100) / 104 = 3.8%, the whole range (half of it printed ±2%).
    assert "| story | prose | 100.6 | 1.00x ±1% | 1.00x ±1% | 1.03x ±4% | -3.3% |" in text, text
    assert "cells: the interval on calibrated / that policy not wholly below 1x: 1/1 cells " \
           "with a verdict = 100%" in text, text
    assert "Misses:\n\n- none\n" in text


def test_a_flagged_table_says_its_flags_are_the_re_measures():
    from bench.policies_report import _table

    data = {"engine": "torch", "calibrate_s": 2.0,
            "table": {"ratio": [1.0, 0.9], "lo": [0.9, 0.8], "hi": [1.1, 1.2], "n": 6,
                      "flagged": [2]}}
    assert _table(data)[0] == (
        "Width costs (torch, quick calibration, n=6 rounds, 2 s; median [lowest-highest round],"
        " a range, not an interval) (not monotone at [2], judged on the re-measure's own "
        "rounds): w1=1.00 [0.90-1.10] w2=0.90 [0.80-1.20]")
