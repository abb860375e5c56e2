"""Replaying a greedy reply under a policy gives the live run's counters exactly; its trace
is priced with a width-cost table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import generate
from specfleet.engine.predict import predicted_speedup, replay, trace_cost
from specfleet.engine.runners.toy import InductionModel, ScriptModel, lcg_tokens
from specfleet.engine.stats import RoundTrace

GB10 = (1.23, 1.37, 1.76, 2.43, 3.04, 3.47, 3.84, 3.91, 3.89, 4.02)
POLICIES = {
    "graded": PromptLookupConfig(policy="graded"),
    "gated": PromptLookupConfig(policy="gated"),
    "calibrated": PromptLookupConfig(max_draft=12, policy="calibrated", costs=GB10),
    "fixed": PromptLookupConfig(adaptive=False),
}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(1, 5000), earliest=st.booleans(), policy=st.sampled_from(sorted(POLICIES)),
       max_tokens=st.integers(1, 80))
def test_replayed_counters_equal_the_live_run(seed, earliest, policy, max_tokens):
    prompt = lcg_tokens(seed, 40, 6)
    lookup = POLICIES[policy]
    live = generate(InductionModel(earliest=earliest), prompt, max_tokens=max_tokens,
                    lookup=lookup, trace=True)
    again = replay(prompt, live.tokens, stop_reason=live.stop_reason, max_tokens=max_tokens,
                   lookup=lookup, costs=GB10)
    assert again.generation.stats == live.stats
    assert [(t.kind, t.width) for t in again.generation.trace] == [
        (t.kind, t.width) for t in live.trace]


class EosAfter(ScriptModel):
    def __init__(self, script, eos):
        super().__init__([*script, eos])
        self.eos_ids = frozenset({eos})


def test_a_reply_that_ended_on_eos_replays_to_the_same_stop():
    prompt = [5, 6, 7, 8, 5, 6, 7]
    reply = [8, 5, 6, 7, 8, 5]
    live = generate(EosAfter([*prompt, *reply], 99), prompt, max_tokens=50,
                    lookup=POLICIES["graded"])
    assert live.stop_reason == "eos" and live.tokens == reply
    again = replay(prompt, reply, stop_reason="eos", max_tokens=50, lookup=POLICIES["graded"],
                   costs=GB10)
    assert again.generation.stop_reason == "eos" and again.generation.stats == live.stats


def test_a_reply_the_replay_cannot_reproduce_is_refused():
    with pytest.raises(ValueError, match="differs"):
        replay([1, 2], [3, 4], stop_reason="max_tokens", max_tokens=5, lookup=None, costs=GB10)


def trace(kind, width):
    return RoundTrace(index=0, kind=kind, width=width, budget=0, proposed=0, accepted=0,
                      emitted=1, policy=None, cache_len=0, context_len=0, in_flight=False)


def test_trace_cost_prices_each_round_kind():
    rounds = [trace("pipelined", 1), trace("drain", 0), trace("sync", 1), trace("verify", 3),
              trace("verify", 12)]
    assert trace_cost(rounds, GB10) == pytest.approx(1 + 0 + 1.23 + 1.76 + 4.02 + 2 * 0.13)


def test_plain_replay_is_one_step_per_decode_round_and_the_speedup_formula():
    prompt = lcg_tokens(3, 30, 6)
    live = generate(InductionModel(), prompt, max_tokens=40)
    plain = replay(prompt, live.tokens, stop_reason="max_tokens", max_tokens=40, lookup=None,
                   costs=GB10)
    assert plain.cost_steps == plain.generation.stats.rounds == 39
    assert predicted_speedup(40.0, 20.0, 0.0) == 2.0
    assert predicted_speedup(40.0, 20.0, 20.0) == pytest.approx(60 / 40)
