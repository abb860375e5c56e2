"""The strictly sequential reference decoder (spec 8.11, 10)."""

from __future__ import annotations

import pytest

from specfleet.engine.reference import sequential_reference
from specfleet.engine.runners.toy import ConstantModel, InductionModel, ScriptModel
from specfleet.engine.sampling import SamplerConfig

GREEDY = SamplerConfig()


def test_sequential_reference_feeds_one_token_per_forward():
    model = InductionModel()
    out = sequential_reference(model, [1, 2, 3], 10, GREEDY)
    assert len(out) == 10 and model.forward_widths == [1] * 12
    assert sequential_reference(ConstantModel(), [3] * 4, 50, GREEDY, (1, 1, 8)) == [3] * 8
    with pytest.raises(ValueError):
        sequential_reference(model, [], 4, GREEDY)


def test_sequential_reference_samples_against_the_full_history():
    penalty = SamplerConfig(repetition_penalty=2.0, repetition_last_n=2)
    # Induction copies 1 (the follower of the earlier 4): logit 8 on 1, 7 on 2. The penalty
    # halves 1, which is among the last two history tokens, so 2 wins.
    assert sequential_reference(InductionModel(), [4, 1, 4], 1, penalty) == [2]
    assert sequential_reference(InductionModel(), [4, 1, 4], 1, GREEDY) == [1]


def test_sequential_reference_stops_at_eos_and_max_tokens():
    model = ScriptModel([1, 2, 3, 4])
    assert sequential_reference(model, [1], 2, GREEDY) == [2, 3]
    assert sequential_reference(ConstantModel(token=7), [1], 5, GREEDY) == []
    assert sequential_reference(ConstantModel(), [1], 0, GREEDY) == []
