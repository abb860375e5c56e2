"""`replay`'s counter check on runs stored before the loop stopped re-feeding a reply that had
ended: their last round counted a re-feed today's replay does not, which is no mismatch; any
other difference still is."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specfleet.engine.config import PromptLookupConfig, policy_revision
from specfleet.engine.loop import generate
from specfleet.engine.predict import replay_runner
from specfleet.engine.stats import COUNTER_FIELDS
from specfleet.report.predictions import check_counters

PROMPT = [1, 2, 3, 4, 1, 2, 3]
LOOKUP = PromptLookupConfig(max_draft=4, adaptive=False, ngram_min=1)


def _stored(refed_more: int) -> SimpleNamespace:
    """A run of a re-feeding model whose reply ends on EOS inside a missed block, stored with
    `refed_more` re-fed tokens beyond what the loop counts today."""
    live = generate(replay_runner(PROMPT, [4, 1], True, True), PROMPT, max_tokens=20,
                    lookup=LOOKUP)
    counters = {name: getattr(live.stats, name) for name in COUNTER_FIELDS}
    counters["refed_tokens"] += refed_more
    return SimpleNamespace(
        run_key="old", prompt_token_ids=PROMPT, token_ids=live.tokens, stop_reason="eos",
        max_tokens=20, loop_guard=None,
        engine_config={"lookup": LOOKUP.as_dict(), "rollback_kind": "refeed", "pipelines": True,
                       "policy_revision": policy_revision(LOOKUP)},
        **counters)


@pytest.mark.parametrize(("refed_more", "said"), [
    (0, []),
    (2, []),  # the final round's accepted + 1, as the loop counted it before
    (3, ["old: refed_tokens replayed 0, stored 3"]),
])
def test_an_old_runs_final_refeed_is_no_mismatch_but_any_other_count_is(refed_more, said):
    assert check_counters([_stored(refed_more)]) == (said, 0)
