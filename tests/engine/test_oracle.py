"""The oracle bound: the DP equals a brute force over every schedule on tiny replies, its
schedule runs through the real loop at exactly its cost, and no replayed policy beats it."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specfleet.engine.loop as loop_module
from specfleet.engine.calibrated import width_cost
from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.governor import DraftGovernor, GovernorState
from specfleet.engine.lookup import cycle_out, find_draft
from specfleet.engine.loop import generate
from specfleet.engine.oracle import oracle
from specfleet.engine.predict import replay, replay_runner, trace_cost
from specfleet.engine.runners.toy import lcg_tokens

GB10_17B = (1.23, 1.37, 1.76, 2.43, 3.04, 3.47, 3.84, 3.91, 3.89, 4.02)
GB10_8B = (1.07, 1.15, 1.59, 2.10, 2.86, 3.37, 3.85, 3.30, 3.28, 3.28)  # falls at width 8
APPLE = (1.1, 1.3, 1.5, 1.7, 1.9, 2.1, 2.3, 2.5)
CPU = (1.03, 1.85, 2.26, 1.78, 1.7, 1.7, 1.7, 1.72)  # torch here: width 4 below width 3
TABLES = {"gb10-1.7b": GB10_17B, "gb10-8b": GB10_8B, "apple": APPLE, "cpu": CPU,
          "flat": (1.0, 1.0), "sync-cheap": (0.9, 1.4, 1.6)}


def schedules(prompt, reply, stop, max_tokens, lookup, costs, refeeds):
    """Every schedule as (cost, drafts per round): each verify simulated row by row as the
    loop runs it, proposals from the reference scan (cycled where a cycling policy's are),
    a plain step min(1, cost(1))."""
    end = len(reply) + (1 if stop == "eos" and reply else 0)
    targets = [*reply, None]

    def from_(position):
        if position >= end:
            yield 0.0, ()
            return
        for cost, rest in from_(position + 1):
            yield min(1.0, costs[0]) + cost, (0, *rest)
        context = [*prompt, *reply[:position]]
        draft = cycle_out(context, find_draft(context, lookup), lookup.max_draft)
        for k in range(1, min(len(draft), max_tokens - position - 1) + 1):
            accepted, row = 0, 0
            for row in range(k + 1):
                last = position + row + 1 == end  # EOS read, token limit or loop guard
                if last or row == k or targets[position + row] != draft[row]:
                    break
                accepted += 1
            verify = width_cost(costs, k + 1)
            if refeeds and accepted < k and not last:  # an ended reply re-feeds nothing
                verify += width_cost(costs, accepted + 1)
            for cost, rest in from_(position + row + 1):
                yield verify + cost, (k, *rest)

    return list(from_(1)) if end > 1 else [(0.0, ())]


def tiny_cases(count):
    rng = random.Random(20)
    for _ in range(count):
        alphabet = rng.choice([2, 3, 4])
        prompt = [rng.randrange(alphabet) for _ in range(rng.randint(1, 6))]
        reply = [rng.randrange(alphabet) for _ in range(rng.randint(0, 8))]
        stop = rng.choice(["max_tokens", "eos", "loop_guard"])
        max_tokens = len(reply) if stop == "max_tokens" else len(reply) + rng.randint(1, 3)
        lookup = PromptLookupConfig(rng.randint(1, 3), 1, rng.randint(1, 4))
        costs = tuple(round(rng.uniform(0.8, 3.0), 2) for _ in range(rng.randint(2, 6)))
        yield prompt, reply, stop, max_tokens, lookup, costs, rng.random() < 0.3


def test_the_dp_equals_the_cheapest_of_every_schedule_on_replies_up_to_8_tokens():
    enumerated = 0
    for prompt, reply, stop, max_tokens, lookup, costs, refeeds in tiny_cases(400):
        every = schedules(prompt, reply, stop, max_tokens, lookup, costs, refeeds)
        enumerated += len(every)
        got = oracle(prompt, reply, stop_reason=stop, max_tokens=max_tokens, lookup=lookup,
                     costs=costs, refeeds=refeeds)
        cheapest = min(cost for cost, _ in every)
        assert got.cost_steps == pytest.approx(cheapest, abs=1e-9), (prompt, reply, stop, costs)
        assert sum(s.cost_steps for s in got.steps) == pytest.approx(got.cost_steps, abs=1e-9)
        all_plain = every[0][1]  # the first schedule made: one plain step per position
        assert sum(s.emitted for s in got.steps) == len(all_plain)
    assert enumerated > 20_000  # the brute force met many drafted schedules


class ScriptedGovernor(DraftGovernor):
    """Budgets read from a list, one per round (the oracle's drafts); the inherited `size`
    verifies the whole proposal cut to that budget, cycled as the oracle's are."""

    cycles = True

    def __init__(self, budgets):
        self.budgets = list(budgets)

    def budget(self):
        return self.budgets.pop(0)

    def record(self, accepted, proposed):
        return None

    def probes_while_paused(self):
        return False

    def shadow_confirmed(self):
        return None

    def state(self):
        return GovernorState("scripted", 0.0, 0, False)


def play(monkeypatch, prompt, reply, stop, max_tokens, lookup, costs, refeeds, guard=None):
    """Run the oracle's schedule through the real loop, unpipelined (a plain step is then a
    synchronous one, `cost(1)`); return (oracle, loop's generation, loop's priced cost)."""
    best = oracle(prompt, reply, stop_reason=stop, max_tokens=max_tokens, lookup=lookup,
                  costs=costs, refeeds=refeeds)
    budgets = [s.draft for s in best.steps]
    monkeypatch.setattr(loop_module, "make_governor", lambda config, r: ScriptedGovernor(budgets))
    runner = replay_runner(prompt, reply, stop == "eos", refeeds)
    done = generate(runner, prompt, max_tokens=max_tokens, lookup=lookup, loop_guard=guard,
                    trace=True, pipeline=False)
    return best, done, trace_cost(done.trace, costs)


@pytest.mark.parametrize("refeeds", [False, True])
@pytest.mark.parametrize("stop", ["max_tokens", "eos", "loop_guard"])
def test_the_oracle_schedule_runs_through_the_loop_at_exactly_its_cost(monkeypatch, stop,
                                                                       refeeds):
    prompt = lcg_tokens(4, 40, 5)
    reply = [*prompt[5:25], 9, 9, *prompt[3:20], 7, *prompt[30:40]]
    guard = None
    if stop == "loop_guard":
        reply, guard = [*reply, 8, 8, 8, 8], (1, 1, 4)
    max_tokens = len(reply) if stop == "max_tokens" else len(reply) + 20
    costs = (1.0, *GB10_8B[1:])  # a synchronous step costs what a pipelined one does
    for lookup in (PromptLookupConfig(), PromptLookupConfig(3, 1, 12)):
        best, done, cost = play(monkeypatch, prompt, reply, stop, max_tokens, lookup, costs,
                                refeeds, guard)
        assert done.tokens == reply and done.stop_reason == stop
        assert [t.width - 1 for t in done.trace] == [s.draft for s in best.steps]
        assert [t.accepted for t in done.trace] == [s.accepted for s in best.steps]
        assert cost == pytest.approx(best.cost_steps, abs=1e-9)
        assert best.verifies > 0 and best.accepted > 20


def test_the_brute_force_prices_a_schedule_as_the_loop_does(monkeypatch):
    """The brute force is the DP's reference, so its pricing is checked against the loop:
    random schedules of tiny replies, re-feeds and rejected proposals included."""
    rng = random.Random(3)
    rejected = refed = 0
    for prompt, reply, stop, max_tokens, lookup, costs, refeeds in tiny_cases(150):
        if stop == "loop_guard" or len(reply) < 2:
            continue  # a random reply does not end where a loop guard would fire
        costs = (min(costs[0], 1.0), *costs[1:])  # unpipelined, a plain step is cost(1)
        every = schedules(prompt, reply, stop, max_tokens, lookup, costs, refeeds)
        for cost, drafts in rng.sample(every, min(4, len(every))):
            monkeypatch.setattr(loop_module, "make_governor",
                                lambda config, r, d=drafts: ScriptedGovernor(d))
            done = generate(replay_runner(prompt, reply, stop == "eos", refeeds), prompt,
                            max_tokens=max_tokens, lookup=lookup, trace=True, pipeline=False)
            assert done.tokens == reply and done.stop_reason == stop
            assert trace_cost(done.trace, costs) == pytest.approx(cost, abs=1e-9)
            rejected += done.stats.proposed - done.stats.accepted
            refed += done.stats.refed_tokens
    assert rejected > 50 and refed > 10


def copy_heavy(rng: random.Random, prompt: list[int]) -> list[int]:
    """Spans of the prompt with a few edited tokens between them."""
    reply: list[int] = []
    while len(reply) < 90:
        start = rng.randrange(len(prompt) - 4)
        reply += prompt[start : start + rng.randint(3, 25)]
        reply += [rng.randrange(400, 420) for _ in range(rng.randint(0, 3))]
    return reply


def prose_like(rng: random.Random, prompt: list[int]) -> list[int]:
    """Mostly fresh tokens over a wide vocabulary; now and then a short phrase comes back."""
    reply: list[int] = []
    while len(reply) < 90:
        if reply and rng.random() < 0.15:
            start = rng.randrange(len(reply))
            reply += reply[start : start + rng.randint(2, 4)]
        else:
            reply.append(rng.randrange(200))
    return reply


POLICIES = {
    "graded": PromptLookupConfig(policy="graded"),
    "gated": PromptLookupConfig(policy="gated"),
    "calibrated": PromptLookupConfig(max_draft=32, policy="calibrated"),
    "fixed": PromptLookupConfig(adaptive=False),
    "fixed-1gram": PromptLookupConfig(4, 1, 12, adaptive=False),
}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["copy", "prose"]),
       table=st.sampled_from(sorted(TABLES)), stop=st.sampled_from(["max_tokens", "eos"]),
       refeeds=st.booleans())
def test_no_policy_beats_the_oracle(seed, kind, table, stop, refeeds):
    rng = random.Random(seed)
    prompt = [rng.randrange(300) for _ in range(60)]
    reply = (copy_heavy if kind == "copy" else prose_like)(rng, prompt)
    costs = TABLES[table]
    max_tokens = len(reply) if stop == "max_tokens" else len(reply) + 10
    plain = replay(prompt, reply, stop_reason=stop, max_tokens=max_tokens, lookup=None,
                   costs=costs, refeeds=refeeds)
    for name, config in POLICIES.items():
        lookup = PromptLookupConfig(config.ngram_max, config.ngram_min, config.max_draft,
                                    config.adaptive, config.policy, costs)
        best = oracle(prompt, reply, stop_reason=stop, max_tokens=max_tokens, lookup=lookup,
                      costs=costs, refeeds=refeeds)
        done = replay(prompt, reply, stop_reason=stop, max_tokens=max_tokens, lookup=lookup,
                      costs=costs, refeeds=refeeds)
        assert best.efficiency(done.cost_steps) <= 1.0 + 1e-12, (name, best.steps)
        assert best.cost_steps <= plain.cost_steps


def test_a_copy_is_verified_in_full_blocks_and_prose_is_stepped_plainly():
    prompt = lcg_tokens(9, 50, 1000)
    copy = oracle(prompt, prompt[10:50], stop_reason="max_tokens", max_tokens=40,
                  lookup=PromptLookupConfig(), costs=GB10_17B)
    assert copy.plain_steps <= 2 and copy.verifies >= 5
    assert {s.draft for s in copy.steps if s.draft} <= {7, 6, 5, 4, 3, 2, 1}
    prose = oracle(prompt, lcg_tokens(10, 40, 1000), stop_reason="max_tokens", max_tokens=40,
                   lookup=PromptLookupConfig(), costs=GB10_17B)
    assert prose.verifies == 0 and prose.cost_steps == 39.0


def test_a_table_dearer_at_every_width_raises_the_bound():
    prompt = lcg_tokens(2, 80, 40)
    reply = [*prompt[:30], *lcg_tokens(3, 30, 40), *prompt[40:70]]
    # Flat (every width one step) <= Apple Silicon <= GB10 1.7B at every width up to 8.
    cost = {name: oracle(prompt, reply, stop_reason="max_tokens", max_tokens=len(reply),
                         lookup=PromptLookupConfig(), costs=TABLES[name]).cost_steps
            for name in ("flat", "apple", "gb10-1.7b")}
    assert cost["flat"] < cost["apple"] < cost["gb10-1.7b"] < len(reply) - 1


def test_empty_and_one_token_replies_cost_nothing_and_an_eos_costs_a_step():
    lookup = PromptLookupConfig()
    assert oracle([1, 2], [], stop_reason="eos", max_tokens=5, lookup=lookup,
                  costs=APPLE).cost_steps == 0.0
    assert oracle([1, 2], [3], stop_reason="max_tokens", max_tokens=1, lookup=lookup,
                  costs=APPLE).steps == ()
    eos = oracle([1, 2], [3], stop_reason="eos", max_tokens=5, lookup=lookup, costs=APPLE)
    assert eos.cost_steps == 1.0 and [s.emitted for s in eos.steps] == [1]


def test_efficiency_of_a_free_policy_is_one():
    best = oracle([1, 2], [3], stop_reason="max_tokens", max_tokens=1,
                  lookup=PromptLookupConfig(), costs=APPLE)
    assert best.efficiency(0.0) == 1.0


def test_a_hand_worked_reply():
    # The context's end cuts every proposal short, so each is cycled: position 1 proposes
    # [2, 1, 2], position 2 [1, 2, 1]. A plain step then all three at 2 cost 2.0, as two at 1
    # then one at 4 would (the uncycled schedule); the first cheapest schedule is kept.
    best = oracle([1, 2, 1, 2], [1, 2, 1, 2, 1, 2], stop_reason="max_tokens", max_tokens=6,
                  lookup=PromptLookupConfig(2, 1, 3), costs=(1.0, 1.0, 1.0, 1.0))
    assert [(s.position, s.draft, s.accepted, s.emitted) for s in best.steps] == [
        (1, 0, 0, 1), (2, 3, 3, 4)]
    assert best.cost_steps == 2.0
