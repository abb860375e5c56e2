"""Greedy parity on the real bundled model, both engines (spec 8): plain greedy decoding and
prompt lookup under graded, gated and non-adaptive emit identical token ids.

A multi-token verify row may round a near-tie the other way (spec 8.3). Such a flip does not
skip the case: the test replays both paths to the divergence row and asserts the two competing
tokens are within `NEAR_TIE_RELATIVE` there, naming the case. Torch runs three benchmark
prompts (two copies, one prose) with their chat template for 48 tokens; MLX's CPU backend is
slow here (~10 tok/s prefill, ~6 tok/s decode), so it runs short raw prompts of the same three
kinds for 12 tokens. The other packaged prompts run in `bench/peers.py` and `matrix run full`.
"""

from __future__ import annotations

import pytest

from specfleet.configs import prompts_dir
from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.forensics import first_divergence, replay_margins
from specfleet.engine.loop import generate

pytestmark = pytest.mark.slow

PROMPTS_DIR = prompts_dir()
PROMPT_NAMES = ("edit_fn", "edit_json", "story")
ARMS = {
    "graded": PromptLookupConfig(policy="graded"),
    "gated": PromptLookupConfig(policy="gated"),
    "non-adaptive": PromptLookupConfig(adaptive=False),
}
TORCH_TOKENS = 48
MLX_TOKENS = 12
# fp32 logits of width-1 and width-8 forwards differ by ~1e-5 here; a flip only counts as a
# near-tie when the competing logits are within 1e-3 of the top logit's magnitude.
NEAR_TIE_RELATIVE = 1e-3
# Short raw prompts of the five kinds, each ending where the model's reply copies from it.
MLX_PROMPTS = {
    "edit_fn": "def add(a, b):\n    total = a + b\n    return total\n\n# renamed:\ndef add(a, b):\n",
    "edit_json": '[{"id": 1, "email": "a@x.com"}, {"id": 2, "email": "b@x.com"}]\nWith "active":\n[{"id": 1,',
    "story": "Once upon a time, a lighthouse keeper found a bottle. Once upon a time, a",
}


def _assert_parity(runner, name: str, ids: list[int], max_tokens: int) -> int:
    """Run plain and every arm; return the drafted rounds seen (to prove lookup worked)."""
    plain = generate(runner, ids, max_tokens=max_tokens).tokens
    drafted = 0
    for arm, config in ARMS.items():
        result = generate(runner, ids, max_tokens=max_tokens, lookup=config)
        drafted += result.stats.drafted_rounds
        if result.tokens == plain:
            continue
        _assert_near_tie(runner, f"{runner.engine}/{name}/{arm}", ids, plain, result.tokens, config)
    return drafted


def _assert_near_tie(runner, case: str, ids, plain, arm_tokens, config) -> None:
    row = first_divergence(plain, arm_tokens)
    margins = replay_margins(runner, ids, plain, arm_tokens, row, width_b=config.max_draft + 1)
    scale = max(abs(margins.a.top2[0][1]), 1.0)
    relative = max(abs(margins.a.gap), abs(margins.b.gap)) / scale
    print(f"near-tie flip {case} at token {row}: {margins}")
    assert relative < NEAR_TIE_RELATIVE, (
        f"{case}: diverges from plain greedy at token {row} ({margins.token_a} vs "
        f"{margins.token_b}) with a relative logit gap of {relative:.2e}, not a near-tie"
    )


@pytest.mark.parametrize("name", PROMPT_NAMES)
def test_torch_lookup_arms_equal_plain_greedy(torch_runner, name):
    text = (PROMPTS_DIR / f"{name}.txt").read_text()
    ids = torch_runner.encode_prompt(text, chat=True)
    drafted = _assert_parity(torch_runner, name, ids, TORCH_TOKENS)
    if name.startswith("edit"):
        assert drafted > 0, f"torch/{name}: prompt lookup never drafted; the case proves nothing"


@pytest.mark.parametrize("name", PROMPT_NAMES)
def test_mlx_lookup_arms_equal_plain_greedy(mlx_runner, name):
    ids = mlx_runner.encode_prompt(MLX_PROMPTS[name], chat=False)
    drafted = _assert_parity(mlx_runner, name, ids, MLX_TOKENS)
    assert drafted > 0, f"mlx/{name}: prompt lookup never drafted; the case proves nothing"
