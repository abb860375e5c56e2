"""Per-width verify cost (spec 7.6, interleaved rounds) on toy runners and a virtual clock."""

from __future__ import annotations

import pytest

from specfleet.engine.runners.toy import InductionModel, ScriptModel
from specfleet.engine.widthcosts import (
    QUICK,
    CalibrationSettings,
    WidthCosts,
    calibration_prompt,
    interpolated,
    measure_width_costs,
    measured_widths,
    non_monotone,
    rotated,
    synthetic_block,
    upper_median,
)

FORWARD_BASE_MS = 1.0
PER_TOKEN_MS = 0.5
READ_MS = 0.25


class TimedInduction(InductionModel):
    """An induction model whose forwards and host reads advance a virtual clock."""

    def __init__(self) -> None:
        super().__init__()
        self.now_s = 0.0

    def forward(self, tokens):
        rows = super().forward(tokens)
        self.now_s += (FORWARD_BASE_MS + PER_TOKEN_MS * len(rows)) / 1000.0
        return rows

    def read_tokens(self, tokens):
        self.now_s += READ_MS / 1000.0
        return super().read_tokens(tokens)

    def clock(self) -> float:
        return self.now_s


def test_fixed_prompt_and_blocks_follow_the_spec_formulas_folded_into_the_vocab():
    assert calibration_prompt(4, 50_000) == [1000, 1037, 1074, 1111]
    assert calibration_prompt(3, 1024) == [1000 % 1024, 1037 % 1024, 1074 % 1024]
    # 37 * 136 = 5032 wraps modulo 5000 before the 1000 offset.
    assert calibration_prompt(137, 50_000)[136] == 1032
    assert synthetic_block(2, 3, 50_000) == [2014, 2027, 2040]
    assert synthetic_block(500, 1, 50_000) == [2000 + 3500 % 3000]
    assert synthetic_block(0, 2, 6) == [2000 % 6, 2013 % 6]


def test_upper_median_takes_index_len_over_two():
    assert upper_median([4.0, 1.0, 3.0, 2.0]) == 3.0
    assert upper_median([5.0, 1.0, 3.0]) == 3.0
    with pytest.raises(ValueError):
        upper_median([])


def settings(**kw):
    base = dict(max_width=4, prompt_len=12, rounds=3, steps=4, reps=2, remeasure=0)
    return CalibrationSettings(**{**base, **kw})


def test_costs_on_a_virtual_clock_are_exact_with_no_spread():
    runner = TimedInduction()
    costs = measure_width_costs(runner, settings(), clock=runner.clock)
    # A pipelined step: one width-1 forward and one host read.
    step_ms = FORWARD_BASE_MS + PER_TOKEN_MS + READ_MS
    assert costs.pipelined_ms == pytest.approx(step_ms)
    expected_sync = [FORWARD_BASE_MS + PER_TOKEN_MS * w + READ_MS for w in range(1, 5)]
    assert costs.sync_ms == pytest.approx(expected_sync)
    ratios = [ms / step_ms for ms in expected_sync]
    assert costs.ratio == pytest.approx(ratios)
    assert costs.ratio_lo == pytest.approx(ratios) and costs.ratio_hi == pytest.approx(ratios)
    assert (costs.engine, costs.device, costs.prompt_len, costs.n) == ("toy", "cpu", 12, 3)
    assert list(costs.widths) == [1, 2, 3, 4] and costs.flagged == ()


def test_widths_rotate_by_one_per_round():
    assert rotated([1, 2, 3], 0) == [1, 2, 3]
    assert rotated([1, 2, 3], 1) == [2, 3, 1]
    assert rotated([1, 2, 3], 4) == [2, 3, 1]


def test_each_round_prefills_then_steps_then_every_width_in_rotation_then_steps():
    runner = ScriptModel(script=[], vocab=5000)
    measure_width_costs(runner, settings(max_width=3, rounds=2, steps=4, reps=1), warm_up=False)
    first = [12, 1, 1, 1, 2, 3, 1, 1]
    second = [12, 1, 1, 2, 3, 1, 1, 1]
    assert runner.forward_widths == first + second


def test_sync_samples_trim_all_but_the_first_token_of_each_block():
    runner = ScriptModel(script=[], vocab=5000)
    measure_width_costs(runner, settings(max_width=3, rounds=1, steps=2, reps=2), warm_up=False)
    steps = runner.cache[12:13]  # the first half of the pipelined steps
    heads = [synthetic_block(r, w, 5000)[0] for w in (1, 2, 3) for r in (0, 1)]
    assert runner.cache[: 12 + 1 + len(heads)] == calibration_prompt(12, 5000) + steps + heads


def test_warm_up_is_one_untimed_round():
    plain = ScriptModel(script=[], vocab=5000)
    measure_width_costs(plain, settings(rounds=1), warm_up=False)
    warmed = ScriptModel(script=[], vocab=5000)
    measure_width_costs(warmed, settings(rounds=1))
    assert warmed.forward_widths == plain.forward_widths * 2


class DippingInduction(TimedInduction):
    """Width 3 costs less than width 2 on this virtual host (like a kernel switch)."""

    def forward(self, tokens):
        rows = super().forward(tokens)
        if len(rows) == 3:
            self.now_s -= 1.0 / 1000.0
        return rows


def test_a_falling_width_is_re_measured_then_flagged():
    lines = []
    runner = DippingInduction()
    costs = measure_width_costs(
        runner, settings(remeasure=1), clock=runner.clock, progress=lines.append
    )
    assert costs.flagged == (3,) and costs.n == 6  # one more pass of three rounds
    assert any("re-measuring" in line for line in lines)
    assert sum("round" in line for line in lines) == 6
    assert "not monotone" in costs.format_table().splitlines()[5]


class PassCosts(InductionModel):
    """Width w's verify in round r costs `ratios[r][w]` pipelined steps of 1 ms (width 1,
    the pipelined step's own width, always 1) on a virtual clock."""

    def __init__(self, ratios: list[dict[int, float]]) -> None:
        self.ratios, self.round, self.now_s = ratios, -2, 0.0  # __init__ resets once
        super().__init__()

    def reset(self):
        super().reset()
        self.round += 1

    def forward(self, tokens):
        rows = super().forward(tokens)
        self.now_s += self.ratios[self.round].get(len(rows), 1.0) / 1000.0
        return rows

    def clock(self) -> float:
        return self.now_s


def two_passes(first: dict[int, list[float]], second: dict[int, list[float]]) -> WidthCosts:
    """The table of two passes of three rounds whose per-round ratios are `first`, `second`."""
    ratios = [{w: r[i] for w, r in one.items()} for one in (first, second) for i in range(3)]
    runner = PassCosts(ratios)
    return measure_width_costs(runner, settings(max_width=4, steps=2, reps=1, remeasure=1),
                               warm_up=False, clock=runner.clock)


def test_a_fall_found_again_by_the_re_measure_stays_flagged_though_the_host_slowed():
    # Width 3 falls 15% under width 2 in both passes; the second ran 25% slower. Pooled, the
    # six rounds' ranges overlapped (2.0-2.7 against 1.7-2.3) and the fall was cleared.
    costs = two_passes({2: [2.0, 2.1, 2.2], 3: [1.7, 1.8, 1.9], 4: [3.0] * 3},
                       {2: [2.5, 2.6, 2.7], 3: [2.1, 2.2, 2.3], 4: [3.5] * 3})
    assert costs.flagged == (3,) and costs.n == 6
    # The table is every round's: medians, lowest and highest over both passes.
    assert costs.ratio[1:3] == pytest.approx((2.35, 2.0))
    assert costs.ratio_lo[1:3] == pytest.approx((2.0, 1.7))
    assert costs.ratio_hi[1:3] == pytest.approx((2.7, 2.3))


def test_the_re_measure_decides_what_is_flagged():
    # First pass: width 4 falls (a transient), width 3 rises; the re-measure finds width 3
    # falling and width 4 rising. Pooled, neither fall could be seen.
    found = two_passes({2: [2.0] * 3, 3: [2.5] * 3, 4: [2.2] * 3},
                       {2: [2.0] * 3, 3: [1.8] * 3, 4: [2.6] * 3})
    assert found.flagged == (3,)
    cleared = two_passes({2: [2.0] * 3, 3: [1.8] * 3, 4: [2.6] * 3},
                         {2: [2.0] * 3, 3: [2.2] * 3, 4: [2.6] * 3})
    assert cleared.flagged == ()
    assert cleared.n == 6


def test_non_monotone_needs_the_whole_range_below_the_previous_width():
    assert non_monotone((1.0, 2.0, 1.8), (1.2, 2.4, 2.1)) == ()
    assert non_monotone((1.0, 2.0, 1.5), (1.2, 2.4, 1.9)) == (3,)


def test_real_clock_gives_positive_costs_and_a_table():
    costs = measure_width_costs(InductionModel(), settings(max_width=3, prompt_len=10))
    assert costs.pipelined_ms > 0
    assert len(costs.sync_ms) == len(costs.ratio) == len(costs.ratio_hi) == 3
    assert all(ms > 0 for ms in costs.sync_ms)
    assert all(lo <= r <= hi for lo, r, hi in zip(costs.ratio_lo, costs.ratio, costs.ratio_hi, strict=True))
    table = costs.format_table().splitlines()
    assert table[1].startswith("pipelined step: ")
    assert [line.split()[0] for line in table[3:-1]] == ["1", "2", "3"]
    assert table[-1] == ("ratio: median over the 3 rounds; min, max: its lowest and highest "
                         "round (a range, not an interval)")


@pytest.mark.parametrize("field", ["max_width", "prompt_len", "rounds", "steps", "reps"])
def test_counts_below_one_are_refused(field):
    with pytest.raises(ValueError, match=field):
        measure_width_costs(InductionModel(), settings(**{field: 0}))


def test_quick_settings_cover_the_calibrated_policy_widths():
    assert QUICK.validate().max_width == 33


def test_width_costs_is_frozen():
    costs = WidthCosts("toy", "cpu", 1, 1.0, (1.0,), (1.0,))
    with pytest.raises(AttributeError):
        costs.pipelined_ms = 2.0  # type: ignore[misc]


def test_the_sparse_grid_measures_up_to_eight_then_one_and_a_half_apart_to_the_widest():
    assert measured_widths(33, every_width=False) == [1, 2, 3, 4, 5, 6, 7, 8, 12, 18, 27, 33]
    assert measured_widths(12, every_width=False) == [*range(1, 9), 12]
    assert measured_widths(6, every_width=False) == [1, 2, 3, 4, 5, 6]
    assert measured_widths(33) == list(range(1, 34))
    assert QUICK.every_width is False  # the quick table (and a worker's) is the sparse one


def test_interpolation_is_exact_at_measured_widths_and_linear_between():
    assert interpolated([1, 2, 4], [1.0, 2.0, 5.0], 4) == (1.0, 2.0, 3.5, 5.0)


def test_a_sparse_calibration_times_only_the_grid_and_fills_the_rest_exactly():
    runner = ScriptModel(script=[], vocab=5000)
    measure_width_costs(runner, settings(max_width=12, rounds=1, steps=2, reps=1,
                                         every_width=False), warm_up=False)
    assert sorted(runner.forward_widths[2:-1]) == [*range(1, 9), 12]
    timed = TimedInduction()
    costs = measure_width_costs(timed, settings(max_width=12, every_width=False),
                                clock=timed.clock)
    # The virtual clock's cost is linear in the width, so interpolation recovers it exactly.
    expected_sync = [FORWARD_BASE_MS + PER_TOKEN_MS * w + READ_MS for w in range(1, 13)]
    assert costs.sync_ms == pytest.approx(expected_sync)
    assert len(costs.ratio) == len(costs.ratio_lo) == len(costs.ratio_hi) == 12
    assert "1..8, 12 measured, the rest interpolated" in costs.method


def test_a_fall_on_the_sparse_grid_is_flagged_at_the_measured_width():
    assert non_monotone([1.0, 2.0, 3.0], [1.1, 2.1, 1.5], widths=[1, 8, 12]) == (12,)
