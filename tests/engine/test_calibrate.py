"""Per-width verify cost (spec 7.6) on exact toy runners and a virtual clock."""

from __future__ import annotations

import pytest

from specfleet.engine.calibrate import (
    DISCARDED_ROUNDS,
    WARMUP_PASSES,
    WARMUP_ROUNDS,
    WARMUP_STEPS,
    WidthCosts,
    calibration_prompt,
    measure_width_costs,
    synthetic_block,
    upper_median,
)
from specfleet.engine.runners.toy import InductionModel, ScriptModel

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


def test_costs_on_a_virtual_clock_are_exact():
    runner = TimedInduction()
    costs = measure_width_costs(
        runner, max_width=4, prompt_len=12, runs=3, steps=5, sync_rounds=4, clock=runner.clock
    )
    # A pipelined step: one width-1 forward and one host read.
    step_ms = FORWARD_BASE_MS + PER_TOKEN_MS + READ_MS
    assert costs.pipelined_ms == pytest.approx(step_ms)
    expected_sync = [FORWARD_BASE_MS + PER_TOKEN_MS * w + READ_MS for w in range(1, 5)]
    assert costs.sync_ms == pytest.approx(expected_sync)
    assert costs.ratio == pytest.approx([ms / step_ms for ms in expected_sync])
    assert (costs.engine, costs.device, costs.prompt_len) == ("toy", "cpu", 12)
    assert list(costs.widths) == [1, 2, 3, 4]


def test_measurement_runs_the_spec_sequence_of_forwards_without_warm_up():
    runner = ScriptModel(script=[], vocab=5000)
    measure_width_costs(
        runner, max_width=2, prompt_len=7, runs=2, steps=3, sync_rounds=2, warm_up=False
    )
    rounds = 2 + DISCARDED_ROUNDS
    pipelined = [7, 1, 1, 1]
    expected = pipelined * 2 + [7] + [1] * rounds + [7] + [2] * rounds
    assert runner.forward_widths == expected


def test_sync_rounds_trim_all_but_the_first_token_of_each_block():
    runner = ScriptModel(script=[], vocab=5000)
    measure_width_costs(
        runner, max_width=3, prompt_len=7, runs=1, steps=2, sync_rounds=3, warm_up=False
    )
    rounds = 3 + DISCARDED_ROUNDS
    # The cache grows by one per round, like a rejected verify: it keeps each block's head.
    heads = [synthetic_block(i, 3, 5000)[0] for i in range(rounds)]
    assert runner.cache == calibration_prompt(7, 5000) + heads


def test_warm_up_is_two_passes_of_pipelined_steps_and_every_width():
    plain = ScriptModel(script=[], vocab=5000)
    measure_width_costs(
        plain, max_width=3, prompt_len=5, runs=1, steps=1, sync_rounds=1, warm_up=False
    )
    warmed = ScriptModel(script=[], vocab=5000)
    measure_width_costs(warmed, max_width=3, prompt_len=5, runs=1, steps=1, sync_rounds=1)
    one_pass = [5] + [1] * WARMUP_STEPS
    for width in (1, 2, 3):
        one_pass += [5] + [width] * WARMUP_ROUNDS
    assert warmed.forward_widths == one_pass * WARMUP_PASSES + plain.forward_widths


def test_real_clock_gives_positive_costs_and_a_table():
    costs = measure_width_costs(
        InductionModel(), max_width=3, prompt_len=10, runs=1, steps=4, sync_rounds=3
    )
    assert costs.pipelined_ms > 0
    assert len(costs.sync_ms) == len(costs.ratio) == 3
    assert all(ms > 0 for ms in costs.sync_ms)
    table = costs.format_table().splitlines()
    assert table[1].startswith("pipelined step: ")
    assert [line.split()[0] for line in table[3:]] == ["1", "2", "3"]


@pytest.mark.parametrize("field", ["max_width", "prompt_len", "runs", "steps", "sync_rounds"])
def test_counts_below_one_are_refused(field):
    with pytest.raises(ValueError, match=field):
        measure_width_costs(InductionModel(), **{field: 0})


def test_width_costs_is_frozen():
    costs = WidthCosts("toy", "cpu", 1, 1.0, (1.0,), (1.0,))
    with pytest.raises(AttributeError):
        costs.pipelined_ms = 2.0  # type: ignore[misc]
