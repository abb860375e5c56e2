"""The copy-heavy prompts and policies the family tests run, without pytest: bench/families.py
and bench/cuda_check.py (run on a GPU host with only the torch extra) use them too."""

from __future__ import annotations

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import generate
from specfleet.engine.runners.base import Runner
from specfleet.engine.runners.tiny_torch import TINY_VOCAB
from specfleet.engine.runners.toy import lcg_tokens

# Width w costs 0.5 + 0.02 (w - 1) plain steps: so cheap that calibrated drafts from its
# prior on, re-feeds priced in, and long blocks once proposals land.
CHEAP_COSTS = tuple(0.5 + 0.02 * i for i in range(17))
POLICIES = {
    "graded": PromptLookupConfig(policy="graded"),
    "gated": PromptLookupConfig(policy="gated"),
    "calibrated": PromptLookupConfig(policy="calibrated", costs=CHEAP_COSTS, max_draft=12),
    "fixed": PromptLookupConfig(adaptive=False, max_draft=4),
}
PROMPT_SEEDS = (2, 3)
PROMPT_TOKENS = 24
REPLY_TOKENS = 40


def copy_heavy_prompt(runner: Runner, seed: int) -> list[int]:
    """Seeded LCG start `s`, the model's own greedy continuation `r` of it: the prompt is
    r[2:16] with one token changed, then s, then r[:4]. Lookup finds r[2:4] and proposes the
    continuation with its edit: some proposals land, the edit is rejected."""
    start = lcg_tokens(seed, 6, TINY_VOCAB)
    own = generate(runner, start, max_tokens=16).tokens
    copy = list(own[2:16])
    copy[7] = (copy[7] + 1 + seed) % TINY_VOCAB
    prompt = copy + start + own[:4]
    if len(prompt) != PROMPT_TOKENS:
        raise AssertionError(f"a copy-heavy prompt of {len(prompt)} tokens, not {PROMPT_TOKENS}")
    return prompt
