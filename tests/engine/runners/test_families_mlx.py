"""Exact rollback on every mlx-lm cache family (`runners/mlx_caches.py`, `runners/tiny_mlx.py`).

Tiny seeded float32 models of each family (window and attention chunk 8) decode prompts of 24
tokens and replies of 40, so every sliding window wraps many times. Lookup configs use
`ngram_min=1`: a random-weight model rarely repeats a 2-gram of its prompt, and a 1-gram
makes every policy draft and mostly miss, so rollback runs in most verifies.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core", reason="the mlx engine is not installed")

from mlx_lm.models.cache import (  # noqa: E402
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    can_trim_prompt_cache,
)

from specfleet.engine.config import PromptLookupConfig  # noqa: E402
from specfleet.engine.forensics import classify, first_divergence, replay_margins  # noqa: E402
from specfleet.engine.loop import generate  # noqa: E402
from specfleet.engine.runners.base import CacheRollbackError, UnsupportedModelError  # noqa: E402
from specfleet.engine.runners.common import IdsOnlyTokenizer  # noqa: E402
from specfleet.engine.runners.mlx import MlxRunner  # noqa: E402
from specfleet.engine.runners.mlx_caches import REFEED_MODEL_TYPES  # noqa: E402
from specfleet.engine.runners.tiny_mlx import (  # noqa: E402
    TINY_FAMILIES,
    VOCAB,
    WINDOW,
    tiny_runner,
)
from specfleet.engine.runners.toy import lcg_tokens  # noqa: E402

pytestmark = pytest.mark.mlx

PROMPT_TOKENS = 24
REPLY_TOKENS = 40
SEEDS = (1, 2)
REFEED_FAMILIES = {"qwen3_5", "nemotron_h", "lfm2", "mamba2", "mamba", "falcon_mamba", "jamba",
                   "qwen3_next", "qwen3_5_moe", "lfm2_moe", "granitemoehybrid", "falcon_h1",
                   "olmo_hybrid", "kimi_linear"}
CHEAP_COSTS = tuple(1.0 + 0.05 * w for w in range(33))  # width w+1 costs 1 + 0.05w steps
CONFIGS = {
    "graded": PromptLookupConfig(policy="graded", ngram_min=1),
    "gated": PromptLookupConfig(policy="gated", ngram_min=1),
    "calibrated": PromptLookupConfig(policy="calibrated", costs=CHEAP_COSTS, ngram_min=1),
    "fixed-4": PromptLookupConfig(max_draft=4, adaptive=False, ngram_min=1),
}
# A verify row and a one-token step differ by float32 rounding only (~1e-6 here).
ROW_ATOL = 1e-3


def copy_prompt(seed: int) -> list[int]:
    """A segment, an edited copy, the segment again: 24 tokens for lookup to draft from."""
    segment = lcg_tokens(seed, PROMPT_TOKENS // 3, VOCAB)
    edited = list(segment)
    edited[3] = (edited[3] + 1) % VOCAB
    return [*segment, *edited, *segment]


@pytest.fixture(scope="module", params=list(TINY_FAMILIES))
def family_runner(request) -> tuple[str, MlxRunner]:
    return request.param, tiny_runner(request.param)


def _near_tie_or_fail(runner, prompt, plain, got, name, config) -> str:
    row = first_divergence(plain, got)
    assert row is not None
    margins = replay_margins(runner, prompt, plain, got, row, width_b=config.max_draft + 1)
    verdict = classify(margins)
    assert verdict == "near-tie", f"{name}: token {row} differs beyond a near-tie: {margins}"
    return f"{name} row {row} gap {margins.min_gap:.2e}"


def test_greedy_prompt_lookup_equals_plain_under_every_policy(family_runner):
    family, runner = family_runner
    proposed = accepted = refed = 0
    near_ties = []
    for seed in SEEDS:
        prompt = copy_prompt(seed)
        plain = generate(runner, prompt, max_tokens=REPLY_TOKENS).tokens
        for name, config in CONFIGS.items():
            result = generate(runner, prompt, max_tokens=REPLY_TOKENS, lookup=config)
            proposed += result.stats.proposed
            accepted += result.stats.accepted
            refed += result.stats.refed_tokens
            if result.tokens != plain:
                near_ties.append(_near_tie_or_fail(runner, prompt, plain, result.tokens, name, config))
    print(f"{family}: {len(SEEDS) * len(CONFIGS)} replies, near-ties {len(near_ties)} {near_ties} "
          f"proposed {proposed} accepted {accepted} refed {refed}")
    assert proposed > accepted  # drafts were rejected, so rollback ran
    assert (refed > 0) == (family in REFEED_FAMILIES)
    assert runner.rollback_kind == ("refeed" if family in REFEED_FAMILIES else "trim")


def _plain_rows(runner: MlxRunner, prompt: list[int], tokens: list[int]) -> list[np.ndarray]:
    """Row p predicts tokens[p + 1], teacher-forced one token at a time as plain decoding."""
    runner.reset()
    rows = [runner.read_row(runner.prefill(prompt), 0)]
    for token in tokens[len(prompt) : -1]:
        rows.append(runner.read_row(runner.forward([token]), 0))
    return rows


def test_every_forward_after_any_rollback_sees_exactly_the_kept_tokens(family_runner):
    """Blocks of random width over a fixed sequence, each rolled back by a random count
    (everything included), from a 3-token prompt until windows have wrapped several times:
    every row of every later forward equals plain decoding's row at that position, so no
    layer kept a rolled-back position or lost a kept one."""
    family, runner = family_runner
    prompt = copy_prompt(4)[:3]
    tokens = [*prompt, *lcg_tokens(5, 40, VOCAB)]
    reference = _plain_rows(runner, prompt, tokens)
    pick = random.Random(family)
    runner.reset()
    runner.read_row(runner.prefill(prompt), 0)
    position = len(prompt)  # tokens[:position] are cached
    refed = 0
    while position + 6 < len(tokens):
        width = pick.choice((1, 2, 3, 5, 6))
        logits = runner.forward(tokens[position : position + width])
        for i in range(width):
            got = runner.read_row(logits, i)
            np.testing.assert_allclose(got, reference[position + i - len(prompt) + 1],
                                       atol=ROW_ATOL, err_msg=f"{family} row {position + i}")
        undo = pick.randint(0, width) if width > 1 else 0
        refed += runner.rollback(undo)
        position += width - undo
        assert runner.cache_len() == position
    assert (refed > 0) == (family in REFEED_FAMILIES)


def test_a_wrapped_sliding_window_takes_back_a_rejected_draft():
    """The reported bug: Gemma 3 (RotatingKVCache, window 512) once the window had wrapped.

    mlx-lm's `trim_prompt_cache` trims only when `can_trim_prompt_cache` holds, i.e. every
    layer's `is_trimmable()`, which for a RotatingKVCache is `offset < max_size`. Past the
    window that is False (asserted below), so the old rollback trimmed no layer, the rejected
    draft stayed in every cache and the next rows attended to it: a different reply, exit 0.
    Here the rows after the rollback equal plain decoding's.
    """
    runner = tiny_runner("gemma3_text")
    prompt = copy_prompt(6)
    plain = generate(runner, prompt, max_tokens=8).tokens
    runner.reset()
    runner.read_tokens(runner.argmax(runner.prefill(prompt)))
    windows = [c for c in runner._cache if isinstance(c, RotatingKVCache)]
    assert windows and all(c.offset > c.max_size == WINDOW for c in windows)
    wrong = [(plain[2] + 1) % VOCAB, (plain[3] + 1) % VOCAB]
    logits = runner.forward([plain[0], plain[1], *wrong])  # plain[1] lands, then a miss
    assert runner.read_tokens(runner.argmax(logits))[:2] == plain[1:3]
    assert not can_trim_prompt_cache(runner._cache)  # the old path would have trimmed nothing
    assert runner.rollback(2) == 0
    assert runner.cache_len() == len(prompt) + 2
    current, rows = plain[2], []
    for _ in range(4):
        current = runner.read_tokens(runner.argmax(runner.forward([current])))[0]
        rows.append(current)
    assert rows == plain[3:7]


@pytest.mark.parametrize("keep", [0, 2])
def test_a_window_with_sink_entries_rolls_back_exactly(keep):
    """mlx-lm's `max_kv_size` form (RotatingKVCache with `keep` sink entries): rolling back
    n of a block leaves the caches as forwarding only the kept tokens would, every n. (Its
    multi-token mask drops sinks a one-token step keeps, so plain decoding is not the
    reference here; the same forward without the rolled-back tokens is.)"""
    runner = tiny_runner("llama")
    runner.model.make_cache = lambda: [RotatingKVCache(WINDOW, keep=keep) for _ in range(2)]
    prompt, block, after = copy_prompt(7), lcg_tokens(8, 5, VOCAB), lcg_tokens(9, 3, VOCAB)

    def rows_after(forward_block: list[int], undo: int) -> list[np.ndarray]:
        runner.reset()
        runner.prefill(prompt)
        if forward_block:
            runner.forward(forward_block)
        runner.rollback(undo)
        return [runner.read_row(runner.forward([t]), 0) for t in after]

    for undo in range(1, len(block) + 1):
        kept = block[: len(block) - undo]
        for got, want in zip(rows_after(block, undo), rows_after(kept, 0), strict=True):
            np.testing.assert_allclose(got, want, atol=ROW_ATOL, err_msg=f"keep {keep} undo {undo}")


def test_a_one_token_step_past_a_wrapped_window_is_not_undone_silently():
    runner = tiny_runner("gemma3_text")
    runner.prefill(copy_prompt(1))
    runner.forward([1])
    with pytest.raises(CacheRollbackError, match=r"layer 0 \(RotatingKVCache\)") as err:
        runner.rollback(1)
    assert "\n" not in str(err.value)


def test_an_unknown_cache_kind_is_refused_at_load_in_one_line():
    model = TINY_FAMILIES["llama"]()
    model.make_cache = lambda: [KVCache(), QuantizedKVCache()]
    with pytest.raises(UnsupportedModelError) as err:
        MlxRunner(model, IdsOnlyTokenizer(), "cpu")
    assert "QuantizedKVCache" in str(err.value) and "layer 1" in str(err.value)
    assert "\n" not in str(err.value)


def test_every_model_type_lookup_drives_with_recurrent_layers_has_a_tiny_family():
    recurrent = {tiny_runner(name).model.model_type for name in TINY_FAMILIES
                 if tiny_runner(name).rollback_kind == "refeed"}
    assert recurrent == REFEED_MODEL_TYPES


def test_a_recurrent_model_type_without_a_proof_is_refused_lookup_in_one_line():
    model = TINY_FAMILIES["mamba"]()
    model.model_type = "recurrent_gemma"  # as mlx-lm names its own; no tiny family proves it
    runner = MlxRunner(model, IdsOnlyTokenizer(), "cpu")
    with pytest.raises(UnsupportedModelError) as err:
        generate(runner, copy_prompt(1), max_tokens=4, lookup=CONFIGS["fixed-4"])
    message = str(err.value)
    assert message.startswith("recurrent_gemma: its recurrent layers") and "on MLX" in message
    assert message.endswith("plain decoding works") and "\n" not in message
    assert len(generate(runner, copy_prompt(1), max_tokens=4).tokens) == 4
    attention_only = TINY_FAMILIES["llama"]()
    attention_only.model_type = "recurrent_gemma"  # only recurrent layers need the proof
    assert MlxRunner(attention_only, IdsOnlyTokenizer(), "cpu").lookup_refusal is None
    unnamed = TINY_FAMILIES["mamba"]()
    del unnamed.model_type  # then its mlx-lm module names it: mlx_lm.models.mamba
    assert MlxRunner(unnamed, IdsOnlyTokenizer(), "cpu").lookup_refusal is None
