"""Replaying a greedy reply under a policy gives the live run's counters exactly; its trace
is priced with a width-cost table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import generate
from specfleet.engine.predict import predicted_speedup, replay, trace_cost
from specfleet.engine.runners.toy import (
    InductionModel,
    RecurrentInductionModel,
    ScriptModel,
    lcg_tokens,
)
from specfleet.engine.stats import RoundTrace

GB10 = (1.23, 1.37, 1.76, 2.43, 3.04, 3.47, 3.84, 3.91, 3.89, 4.02)
POLICIES = {
    "graded": PromptLookupConfig(policy="graded"),
    "gated": PromptLookupConfig(policy="gated"),
    "calibrated": PromptLookupConfig(max_draft=12, policy="calibrated", costs=GB10),
    "fixed": PromptLookupConfig(adaptive=False),
}


class TorchOnCpu(InductionModel):
    """An induction model that says it is torch on a CPU: its steps do not overlap the host."""

    engine = "torch"


class RecurrentTorchOnCpu(RecurrentInductionModel):
    engine = "torch"


# (runner class, its rollback re-feeds, its loop pipelines)
HOSTS = {
    "gpu-like": (InductionModel, False, True),
    "torch-cpu": (TorchOnCpu, False, False),
    "recurrent": (RecurrentInductionModel, True, True),
    "recurrent-torch-cpu": (RecurrentTorchOnCpu, True, False),
}


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(1, 5000), earliest=st.booleans(), policy=st.sampled_from(sorted(POLICIES)),
       max_tokens=st.integers(1, 80), host=st.sampled_from(sorted(HOSTS)))
def test_replayed_counters_equal_the_live_run(seed, earliest, policy, max_tokens, host):
    prompt = lcg_tokens(seed, 40, 6)
    lookup = POLICIES[policy]
    runner_class, refeeds, pipelines = HOSTS[host]
    live = generate(runner_class(earliest=earliest), prompt, max_tokens=max_tokens,
                    lookup=lookup, trace=True)
    again = replay(prompt, live.tokens, stop_reason=live.stop_reason, max_tokens=max_tokens,
                   lookup=lookup, costs=GB10, refeeds=refeeds, pipeline=pipelines)
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
    # Where steps do not overlap the host, a one-token step is the table's unit itself.
    assert trace_cost(rounds, GB10, pipeline=False) == pytest.approx(
        1 + 0 + 1.0 + 1.76 + 4.02 + 2 * 0.13)
    assert trace_cost([trace("sync", 1)], (0.97, 1.5), pipeline=False) == pytest.approx(0.97)


def test_torch_on_a_cpu_or_mps_never_pipelines_and_meets_a_match_at_once():
    """Its forward returns only when computed: pipelining there hides nothing and would
    verify a match that appears while a step is in flight one token late."""
    prompt = list(range(1, 21))
    # Five new tokens (the loop starts pipelining), then a copy of the prompt from 5 on.
    reply = [50, 51, 52, 53, 54, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    lookup = POLICIES["graded"]

    def run(runner_class, pipeline=None):
        return generate(runner_class([*prompt, *reply], vocab=64), prompt, max_tokens=len(reply),
                        lookup=lookup, trace=True, pipeline=pipeline)

    class TorchScript(ScriptModel):
        engine = "torch"

    class TorchMpsScript(TorchScript):  # its token read waits for the whole MPS stream
        device = "mps"

    class TorchCudaScript(TorchScript):
        device = "cuda"

    overlapping, on_cpu = run(ScriptModel), run(TorchScript)
    assert on_cpu.tokens == overlapping.tokens == reply
    assert {"pipelined", "drain"} <= {t.kind for t in overlapping.trace}
    assert {t.kind for t in on_cpu.trace} <= {"sync", "verify"}
    # The match on (5, 6) is verified the round it appears, not after a drain.
    assert on_cpu.stats.rounds < overlapping.stats.rounds
    assert "pipelined" in {t.kind for t in run(TorchScript, pipeline=True).trace}
    assert [t.kind for t in run(TorchMpsScript).trace] == [t.kind for t in on_cpu.trace]
    assert [t.kind for t in run(TorchCudaScript).trace] == [t.kind for t in overlapping.trace]


def test_plain_replay_is_one_step_per_decode_round_and_the_speedup_formula():
    prompt = lcg_tokens(3, 30, 6)
    live = generate(InductionModel(), prompt, max_tokens=40)
    plain = replay(prompt, live.tokens, stop_reason="max_tokens", max_tokens=40, lookup=None,
                   costs=GB10)
    assert plain.cost_steps == plain.generation.stats.rounds == 39
    assert predicted_speedup(40.0, 20.0, 0.0) == 2.0
    assert predicted_speedup(40.0, 20.0, 20.0) == pytest.approx(60 / 40)
