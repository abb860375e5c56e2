"""A verify round that ends the reply (EOS inside the block) re-feeds nothing on a runner
whose rollback re-feeds, and the runner's next reply is still exact (`loop._verify_round`).

Before, the final round restored the recurrent state and fed the kept tokens again: on torch
a forward that ran inside the timed decode, on MLX a graph built on the host and dropped
unrun by the next reply's reset.
"""

from __future__ import annotations

from typing import Any

import pytest

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import Generation, generate
from specfleet.engine.predict import replay_runner
from specfleet.engine.runners.toy import lcg_tokens

FIXED_4 = PromptLookupConfig(max_draft=4, adaptive=False, ngram_min=1)
REPLY_TOKENS = 24


def copy_prompt(seed: int, vocab: int) -> list[int]:
    """A segment, an edited copy, the segment again: 24 tokens for 1-gram lookup to draft from."""
    segment = lcg_tokens(seed, 8, vocab)
    edited = list(segment)
    edited[3] = (edited[3] + 1) % vocab
    return [*segment, *edited, *segment]


def eos_inside_a_missed_block(runner: Any, prompt: list[int]) -> int:
    """A token that, made the EOS, ends the reply at the missed row of a verify: the first
    verify round whose rejected row emits a token the reply has not emitted before."""
    traced = generate(runner, prompt, max_tokens=REPLY_TOKENS, lookup=FIXED_4, trace=True)
    emitted = 1  # the prefill token
    for t in traced.trace:
        row = emitted + t.accepted
        if t.kind == "verify" and t.accepted < t.proposed and t.emitted == t.accepted + 1:
            token = traced.tokens[row]
            if token not in traced.tokens[:row]:
                return token
        emitted += t.emitted
    raise AssertionError("no verify missed on a fresh token: pick another prompt")


def assert_final_verify_fed_nothing(result: Generation, widths: list[int]) -> None:
    last = result.trace[-1]
    assert result.stop_reason == "eos"
    assert last.kind == "verify" and last.accepted < last.proposed, last
    assert widths[-1] == last.proposed + 1, f"forwards after the final verify: {widths[-3:]}"
    assert last.refed == 0
    assert result.stats.refed_tokens == sum(t.refed for t in result.trace)


def test_a_reply_ending_inside_a_missed_block_is_not_refed_toy():
    """The replay runner (script model, re-feeding rollback): EOS at the second row of a
    4-proposal block; its forwards are the verifies only."""
    prompt = [1, 2, 3, 4, 1, 2, 3]
    runner = replay_runner(prompt, [4, 1], ended_on_eos=True, refeeds=True)
    result = generate(runner, prompt, max_tokens=20, lookup=FIXED_4, trace=True, pipeline=False)
    assert result.tokens == [4, 1] and result.trace[-1].proposed == 4
    assert_final_verify_fed_nothing(result, runner.forward_widths)


@pytest.mark.mlx
def test_mlx_hybrid_final_round_runs_no_refeed_and_the_next_reply_is_exact():
    """Qwen3.5-style hybrid (linear attention + full attention) on MLX: count the runner's
    forwards around a final round that rejects part of its draft, then decode again."""
    pytest.importorskip("mlx.core", reason="the mlx engine is not installed")
    from specfleet.engine.runners.tiny_mlx import VOCAB, tiny_runner

    runner, widths = tiny_runner("qwen3_5"), []
    forward_ids = runner._forward_ids
    runner._forward_ids = lambda ids: widths.append(int(ids.size)) or forward_ids(ids)
    ends_unrefed_then_replies_exactly(runner, tiny_runner("qwen3_5"), VOCAB, widths)


@pytest.mark.torch
def test_torch_refeed_final_round_runs_no_forward_and_the_next_reply_is_exact():
    """Qwen3-Next on torch with the re-feeding rollback (transformers 5.24's way), where the
    re-feed is an eager forward inside the timed decode."""
    pytest.importorskip("transformers", reason="the torch engine is not installed")
    from specfleet.engine.runners.tiny_torch import TINY_VOCAB, tiny_runner

    runner, widths = tiny_runner("qwen3_next", recurrent="refeed"), []
    run = runner._run
    runner._run = lambda ids, logits_to_keep=0: widths.append(len(ids)) or run(
        ids, logits_to_keep)
    fresh = tiny_runner("qwen3_next", recurrent="refeed")
    ends_unrefed_then_replies_exactly(runner, fresh, TINY_VOCAB, widths)


def ends_unrefed_then_replies_exactly(runner: Any, fresh: Any, vocab: int,
                                      widths: list[int]) -> None:
    """`runner` ends a reply on an EOS inside a missed block without a re-feed, then replies
    as plain decoding on `fresh` (the same weights) does: nothing of the un-rolled-back
    block leaks into the next reply."""
    assert runner.rollback_kind == "refeed"
    prompt = copy_prompt(1, vocab)
    eos = eos_inside_a_missed_block(runner, prompt)
    plain = generate(fresh, prompt, max_tokens=REPLY_TOKENS).tokens
    runner.eos_ids = frozenset({eos})
    ended = generate(runner, prompt, max_tokens=REPLY_TOKENS, lookup=FIXED_4, trace=True)
    assert_final_verify_fed_nothing(ended, widths)
    assert plain[: len(ended.tokens) + 1] == [*ended.tokens, eos]
    runner.eos_ids = frozenset()
    again = generate(runner, prompt, max_tokens=REPLY_TOKENS, lookup=FIXED_4)
    assert again.tokens == plain
    assert again.stats.refed_tokens > 0  # the next reply still rolls back by re-feeding
