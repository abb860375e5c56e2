"""What produced a run apart from the code: the parts a regression must share."""

from __future__ import annotations

from types import SimpleNamespace

from specfleet.stats.provenance import differences


def run(**config) -> SimpleNamespace:
    return SimpleNamespace(weights_hash="w", prompt_hash="p", max_tokens=32,
                           host_fingerprint="h", versions={"torch": "2"}, conditions=None,
                           engine_config={"policy": "calibrated", "costs": [1.0, 1.5], **config})


def test_a_measured_or_stored_cost_table_is_the_same_setting() -> None:
    # The run that measured the table ("measured") and the next that read it ("stored") read
    # as "differs in engine config", so compare never called a slow-down a regression.
    assert differences([run(costs_source="measured")], [run(costs_source="stored")]) == []
    assert differences([run()], [run(costs=[1.0, 2.0])]) == ["engine config"]


def test_greedy_against_sampled_runs_is_named_sampling() -> None:
    # It read "differs in engine config": a user could not tell it was the sampler.
    greedy, sampled = run(temperature=0.0, seed=None), run(temperature=0.8, seed=3)
    assert differences([greedy], [sampled]) == ["sampling"]
    assert differences([sampled], [run(temperature=0.8, seed=3)]) == []
    assert differences([run()], [greedy]) == []  # a run that recorded none: nothing to compare
