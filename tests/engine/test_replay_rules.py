"""The replay pricing rules a mutation run found unstated (tools/mutations.py --group rules): a
rollback that feeds kept tokens again costs a forward of their width."""

from __future__ import annotations

import pytest

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.predict import replay, trace_cost
from specfleet.engine.stats import RoundTrace

COSTS = (1.2, 1.4, 1.7, 2.0, 2.4)


def verify(width: int, accepted: int, refed: int) -> RoundTrace:
    return RoundTrace(index=0, kind="verify", width=width, budget=width - 1,
                      proposed=width - 1, accepted=accepted, emitted=accepted + 1, policy=None,
                      cache_len=0, context_len=0, in_flight=False, refed=refed)


def test_a_re_feed_costs_a_forward_of_its_width() -> None:
    assert trace_cost([verify(5, 2, 0)], COSTS) == pytest.approx(2.4)
    assert trace_cost([verify(5, 2, 3)], COSTS) == pytest.approx(2.4 + 1.7)


def test_a_recurrent_models_replay_pays_for_every_re_feed_of_a_rejected_draft() -> None:
    # The prompt's copy goes 1..8 then 9, 10; the reply copies 1..4 and then leaves it (60):
    # fixed drafts of 4 are partly rejected, and a recurrent model feeds the kept rows again.
    prompt = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 40, 1, 2]
    reply = [3, 4, 60, 61, 62, 1, 2, 3, 4, 70, 71]
    lookup = PromptLookupConfig(adaptive=False, max_draft=4)
    kw = dict(stop_reason="max_tokens", max_tokens=len(reply), lookup=lookup, costs=COSTS)
    trimmed, refed = replay(prompt, reply, **kw), replay(prompt, reply, refeeds=True, **kw)
    refeeds = [t.refed for t in refed.generation.trace if t.refed]
    assert refeeds and trimmed.generation.tokens == refed.generation.tokens == reply
    assert refed.cost_steps == pytest.approx(
        trimmed.cost_steps + sum(COSTS[r - 1] for r in refeeds))
