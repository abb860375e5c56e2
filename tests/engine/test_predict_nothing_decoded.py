"""`engine.predict.predicted_speedup` on a reply of the prefill token alone (`max_tokens: 1`,
or EOS first): no step to save, so 1x, never a 0x loss."""

from __future__ import annotations

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.oracle import oracle
from specfleet.engine.predict import predicted_speedup, replay

COSTS = (1.0, 1.5, 2.0)
PROMPT = [1, 2, 3, 1, 2, 3]


def test_a_one_token_reply_predicts_no_speed_up_and_no_loss():
    # `replay --oracle` printed "0.0 / 0.0 | 0.000x" for such a cell, and a ceiling of 0.000x.
    plain = replay(PROMPT, [1], stop_reason="max_tokens", max_tokens=1, lookup=None,
                   costs=COSTS)
    graded = replay(PROMPT, [1], stop_reason="max_tokens", max_tokens=1,
                    lookup=PromptLookupConfig(), costs=COSTS)
    best = oracle(PROMPT, [1], stop_reason="max_tokens", max_tokens=1,
                  lookup=PromptLookupConfig(), costs=COSTS)
    assert plain.cost_steps == graded.cost_steps == best.cost_steps == 0.0
    assert predicted_speedup(plain.cost_steps, graded.cost_steps, 0.0) == 1.0
    assert predicted_speedup(plain.cost_steps, best.cost_steps, 0.0) == 1.0
