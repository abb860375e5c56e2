"""Exact toy runners: real cache semantics, counted forwards and host reads (spec 6, 10)."""

from __future__ import annotations

import pytest

from specfleet.engine.runners.base import CacheRollbackError, Runner
from specfleet.engine.runners.toy import (
    ConstantModel,
    InductionModel,
    ModelOwnedStateModel,
    RecurrentInductionModel,
    ScriptModel,
    UntrimmableModel,
    WidthRecordingModel,
    ZeroCostRunner,
)


@pytest.mark.parametrize(
    "runner",
    [ScriptModel([1, 2, 3]), InductionModel(), ConstantModel(), ZeroCostRunner([1, 2, 3])],
    ids=type,
)
def test_toy_runners_implement_the_protocol(runner):
    assert isinstance(runner, Runner)
    assert runner.engine == "toy" and runner.device == "cpu"
    gb, kind = runner.peak_memory()  # no device allocator: the process's peak RSS
    assert gb > 0 and kind == "process peak RSS"


def test_script_model_predicts_the_script_token_after_each_cached_position():
    model = ScriptModel([10, 11, 12, 13, 14, 15])
    last = model.prefill([10, 11])
    assert model.argmax(last) == [12]
    rows = model.forward([99, 98])  # inputs do not matter, positions do
    assert model.argmax(rows) == [13, 14]
    assert model.read_row(rows, 0)[13] == 10.0 and model.read_row(rows, 0).sum() == 10.0
    assert model.rollback(1) == 0
    assert model.cache == [10, 11, 99]
    assert model.argmax(model.forward([0])) == [14]
    assert model.forward_widths == [2, 2, 1]
    assert model.host_reads == 2


def test_induction_model_copies_the_follower_of_the_latest_earlier_occurrence():
    latest = InductionModel()
    latest.prefill([1, 2, 1, 3, 1])
    assert latest.argmax([latest.row(latest.cache)]) == [3]
    earliest = InductionModel(earliest=True)
    earliest.prefill([1, 2, 1, 3, 1])
    assert earliest.argmax([earliest.row(earliest.cache)]) == [2]


def test_induction_model_counts_the_position_right_before_and_falls_back_to_plus_one():
    """Spec 10: 'an earlier occurrence' includes the position right before it."""
    model = InductionModel()
    assert model.predict([0, 4, 4]) == 4
    assert model.predict([0, 1, 5]) == 0  # (5 + 1) % 6
    row = model.row([0, 1, 5])
    assert row.tolist() == [8.0, 7.0, 0.0, 0.0, 0.0, 0.0]


def test_induction_rows_depend_on_the_whole_cache_so_trims_matter():
    model = InductionModel()
    model.prefill([2, 3, 4])
    before = model.argmax(model.forward([2]))  # 2 was followed by 3
    model.rollback(1)
    model.forward([5, 1])  # now 5 follows nothing
    after = model.argmax(model.forward([5]))
    assert before == [3] and after == [1]


def test_constant_model_has_its_eos():
    model = ConstantModel()
    assert model.eos_ids == frozenset({7}) and model.vocab_size == 8
    assert model.argmax(model.prefill([1, 2])) == [3]


def test_rollback_refuses_more_than_the_last_forward():
    model = ConstantModel()
    model.prefill([1, 2])
    model.forward([3, 3])
    with pytest.raises(ValueError, match="cannot roll back 3 of the last forward's 2"):
        model.rollback(3)
    with pytest.raises(ValueError):
        model.rollback(-1)
    model.rollback(0)
    assert model.cache_len() == 4
    model.rollback(2)
    assert model.cache_len() == 2
    model.reset()
    assert model.cache_len() == 0


def test_refusal_variants_carry_their_flags():
    assert UntrimmableModel().trimmable is False
    assert ModelOwnedStateModel().state_layout == "model_owned"
    assert ConstantModel().trimmable and ConstantModel().state_layout == "external"
    assert WidthRecordingModel().forward_widths == []


def test_zero_cost_runner_follows_its_script():
    runner = ZeroCostRunner(list(range(50, 70)))
    assert runner.read_tokens(runner.argmax(runner.prefill([50, 51, 52]))) == [53]
    assert runner.read_tokens(runner.argmax(runner.forward([53, 54, 0]))) == [54, 55, 56]
    runner.rollback(1)
    assert runner.cache_len() == 5
    assert runner.argmax(runner.forward([55])) == [56]
    assert int(runner.read_row(runner.forward([56]), 0).argmax()) == 57


def test_recurrent_toy_restores_its_state_and_refeeds_the_kept_tokens():
    model = RecurrentInductionModel()
    model.prefill([1, 2, 3])
    model.forward([1, 5, 4, 0])
    assert model.rollback(3) == 1  # [1] kept, fed again from the checkpoint
    assert model.state == model.cache == [1, 2, 3, 1]
    assert model.forward_widths == [3, 4, 1]
    assert model.argmax(model.forward([2])) == [3]  # 2 was followed by 3


def test_recurrent_toy_reports_a_state_that_disagrees_with_its_cache():
    model = RecurrentInductionModel()
    model.prefill([1, 2, 3])
    model.forward([1, 5])
    model._checkpoint = [1, 2]  # a checkpoint missing a position: the rollback must say so
    with pytest.raises(CacheRollbackError, match="recurrent state holds 3 positions"):
        model.rollback(1)
