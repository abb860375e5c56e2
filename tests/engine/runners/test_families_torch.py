"""Prompt lookup on every cache family transformers runs, exactly: tiny seeded models, float64.

Each family (`tiny_torch.TINY_FAMILIES`) replies to copy-heavy prompts under every policy
exactly as plain greedy decoding, over a prompt and reply longer than the sliding window, with
drafts rejected (so rollbacks ran). Recurrent families run both ways back where both are
proven: "record" (the installed transformers' recorded states) and "refeed" (kept tokens fed
again). A rolled back block wider than the window leaves the caches as if it had never been
fed; a rollback that skips a layer is caught and named; an unknown cache layer is refused at
load and a model that ignores the cache at its first prefill, in one line.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specfleet.engine.loop import generate
from specfleet.engine.runners.base import CacheRollbackError, UnsupportedModelError
from specfleet.engine.runners.common import IdsOnlyTokenizer
from specfleet.engine.runners.tiny_torch import (
    TINY_FAMILIES,
    TINY_SLIDING_WINDOW,
    TINY_VOCAB,
    tiny_model,
    tiny_runner,
)
from specfleet.engine.runners.torch import TorchRunner
from specfleet.engine.runners.torch_rollback import (
    RECORDED_MODEL_TYPES,
    REFEED_MODEL_TYPES,
    CacheRollback,
    recurrent_rollback_here,
)
from specfleet.engine.runners.toy import lcg_tokens
from tests.engine.runners.family_cases import (
    POLICIES,
    PROMPT_SEEDS,
    PROMPT_TOKENS,
    REPLY_TOKENS,
    copy_heavy_prompt,
)

FAMILIES = tuple(TINY_FAMILIES)
RECORDS = recurrent_rollback_here() == "record"  # transformers 5.25+
needs_recording = pytest.mark.skipif(not RECORDS, reason="transformers records no states")
# Every family the installed transformers' way, and the re-feed families re-fed as well.
CASES = [pytest.param(name, None, id=name) for name in FAMILIES] + [
    pytest.param(name, "refeed", id=f"{name}-refeed") for name in FAMILIES
    if TINY_FAMILIES[name].model_type in REFEED_MODEL_TYPES and RECORDS]
# Prompt lookup runs on attention-only families, and on recurrent ones proven for the way back
# the installed transformers has (the recorded-only ones are refused before 5.25).
_RUNS_HERE = RECORDED_MODEL_TYPES if RECORDS else REFEED_MODEL_TYPES
LOOKUP_CASES = [case for case in CASES if TINY_FAMILIES[case.values[0]].model_type
                not in RECORDED_MODEL_TYPES - _RUNS_HERE]
# Where seeds 2 and 3 draft nothing, or no draft is rejected (so no rollback would run): the
# tiny model's reply leaves its own continuation at once (bench/families.py shows all).
FAMILY_PROMPT_SEEDS = {"mamba": (4, 5), "zamba2": (5, 11), "lfm2_moe": (7, 8)}
BLOCK = 12  # wider than the sliding window (8)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Family:
    """One family's runner, prompts and plain replies, built once per module."""

    def __init__(self, name: str, recurrent: str | None) -> None:
        self.runner = tiny_runner(name, recurrent=recurrent)
        self.prompts = [copy_heavy_prompt(self.runner, seed)
                        for seed in FAMILY_PROMPT_SEEDS.get(name, PROMPT_SEEDS)]
        self.plain = [generate(self.runner, p, max_tokens=REPLY_TOKENS).tokens
                      for p in self.prompts]


@pytest.fixture(scope="module")
def families() -> dict[str, _Family]:
    return {}


def _family(families: dict[tuple, _Family], name: str, recurrent: str | None) -> _Family:
    if (name, recurrent) not in families:
        families[name, recurrent] = _Family(name, recurrent)
    return families[name, recurrent]


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize(("name", "recurrent"), LOOKUP_CASES)
def test_every_policy_replies_exactly_as_plain_decoding(families, name, recurrent, policy):
    family = _family(families, name, recurrent)
    proposed = accepted = refed = 0
    for prompt, plain in zip(family.prompts, family.plain, strict=True):
        got = generate(family.runner, prompt, max_tokens=REPLY_TOKENS, lookup=POLICIES[policy])
        assert got.tokens == plain, f"{name} {policy}: diverged from plain greedy"
        proposed += got.stats.proposed
        accepted += got.stats.accepted
        refed += got.stats.refed_tokens
    assert len(family.plain[0]) == REPLY_TOKENS > TINY_SLIDING_WINDOW
    assert proposed > accepted, "no draft was rejected: no rollback ran"
    if family.runner.rollback_kind == "refeed":
        assert refed > 0
    else:
        assert refed == 0


def _next_row(runner: TorchRunner, prompt: list[int], fed: list[int], token: int) -> np.ndarray:
    runner.reset()
    runner.prefill(prompt)
    if fed:
        runner.forward(fed)
    return runner.read_row(runner.forward([token]), 0)


@pytest.mark.parametrize(("name", "recurrent"), CASES)
def test_a_block_wider_than_the_window_rolls_back_as_if_never_fed(name, recurrent):
    runner = tiny_runner(name, recurrent=recurrent)
    prompt = lcg_tokens(11, PROMPT_TOKENS, TINY_VOCAB)
    block = lcg_tokens(12, BLOCK, TINY_VOCAB)
    for n in (BLOCK - 1, BLOCK // 2, 1):  # a verify keeps its first token
        kept = block[: BLOCK - n]
        expected = _next_row(runner, prompt, kept, token=7)
        runner.reset()
        runner.prefill(prompt)
        runner.forward(block)
        refed = runner.rollback(n)
        assert refed == (len(kept) if runner.rollback_kind == "refeed" else 0)
        assert runner.cache_len() == PROMPT_TOKENS + len(kept)
        got = runner.read_row(runner.forward([7]), 0)
        # float32 only where a family cannot run float64 (its expert matmul): block rounding.
        atol = 1e-9 if TINY_FAMILIES[name].float64 else 1e-4
        np.testing.assert_allclose(got, expected, rtol=0, atol=atol, err_msg=f"{name} n={n}")


@needs_recording
@pytest.mark.parametrize("name", ["mamba", "jamba", "qwen3_next"])
def test_a_recorded_block_cannot_be_rolled_back_whole(name):
    # transformers' Mamba layers advance the state before the block in place while recording.
    runner = tiny_runner(name, recurrent="record")
    runner.reset()
    runner.prefill(lcg_tokens(11, PROMPT_TOKENS, TINY_VOCAB))
    runner.forward(lcg_tokens(12, BLOCK, TINY_VOCAB))
    with pytest.raises(ValueError, match=f"cannot roll back {BLOCK} of the latest forward's "
                                         f"{BLOCK} rows \\(at most {BLOCK - 1} here\\)"):
        runner.rollback(BLOCK)
    assert runner.rollback(BLOCK - 1) == 0 and runner.cache_len() == PROMPT_TOKENS + 1


@needs_recording
@pytest.mark.parametrize("undo", [0, 3])
def test_a_recorded_rollback_leaves_every_convolution_state_contiguous(undo):
    # The fused one-token kernels on CUDA write the state in place and want it contiguous.
    runner = tiny_runner("qwen3_next", recurrent="record")
    runner.reset()
    runner.prefill(lcg_tokens(11, PROMPT_TOKENS, TINY_VOCAB))
    runner.forward(lcg_tokens(12, BLOCK, TINY_VOCAB))
    runner.rollback(undo)
    runner.forward([7])  # settles a block that kept everything
    states = [t for layer in runner._cache.layers
              for t in getattr(layer, "conv_states", {}).values() if t is not None]
    assert states and all(t.is_contiguous() and not _recording_any(runner) for t in states)


def _recording_any(runner: TorchRunner) -> bool:
    return any(getattr(layer, "record_past", False) for layer in runner._cache.layers)


def _skip_layer(monkeypatch, skipped: int) -> None:
    """Make every rollback leave layer `skipped` as the forward left it."""
    trim, restore = CacheRollback._trim, CacheRollback._restore_layer

    def trim_but(self, layer, index, kind, n):
        if index != skipped:
            trim(self, layer, index, kind, n)

    def restore_but(self, layer, index, kind, mark):
        if index != skipped:
            restore(self, layer, index, kind, mark)

    monkeypatch.setattr(CacheRollback, "_trim", trim_but)
    monkeypatch.setattr(CacheRollback, "_restore_layer", restore_but)


@pytest.mark.parametrize(("name", "recurrent"), CASES)
def test_a_rollback_that_skips_a_layer_is_caught_and_named(monkeypatch, name, recurrent):
    runner = tiny_runner(name, recurrent=recurrent)
    kinds = runner._rollback.kinds
    for skipped, kind in enumerate(kinds):
        if kind == "empty":
            continue
        with monkeypatch.context() as patch:
            _skip_layer(patch, skipped)
            runner.reset()
            runner.prefill(lcg_tokens(11, PROMPT_TOKENS, TINY_VOCAB))
            runner.forward(lcg_tokens(12, BLOCK, TINY_VOCAB))
            with pytest.raises(CacheRollbackError) as err:
                runner.rollback(5)
        message = str(err.value)
        assert f"cache layer {skipped} ({kind})" in message and "\n" not in message


def test_an_unknown_cache_layer_kind_is_refused_in_one_line():
    model = tiny_model("llama")
    model.config.layer_types = ["full_attention", "indexed_attention"]  # a DSA indexer cache
    with pytest.raises(UnsupportedModelError) as err:
        TorchRunner(model, IdsOnlyTokenizer(), "cpu")
    message = str(err.value)
    assert "DynamicIndexedLayer" in message and "llama" in message and "\n" not in message


# Models that keep their state in their own modules: RWKV ignores the cache, RecurrentGemma
# fills only its attention layers' own buffers.
_STATE_OUTSIDE = {
    "rwkv": ({"attention_hidden_size": 32, "num_hidden_layers": 2}, "cache layer 0 (full) holds 0"),
    "recurrent_gemma": ({"num_hidden_layers": 2, "lru_width": 32, "attention_window_size": 8,
                         "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
                         "block_types": ["recurrent", "attention"]},
                        "cache layer 0 (recurrent) holds no state"),
}


@pytest.mark.parametrize("model_type", sorted(_STATE_OUTSIDE))
def test_a_model_that_keeps_its_state_outside_the_cache_is_refused_at_load(model_type):
    # It used to load and then fail at the first prefill, plain decoding too, with a traceback.
    from transformers import AutoConfig, AutoModelForCausalLM

    settings, problem = _STATE_OUTSIDE[model_type]
    config = AutoConfig.for_model(model_type, vocab_size=TINY_VOCAB, hidden_size=32, **settings)
    with pytest.raises(UnsupportedModelError) as err:
        TorchRunner(AutoModelForCausalLM.from_config(config), IdsOnlyTokenizer(), "cpu")
    message = str(err.value)
    assert message.startswith(f"{model_type} keeps its state outside transformers' cache")
    assert problem in message and "plain or with prompt lookup" in message
    assert "\n" not in message


def test_every_verified_recurrent_model_type_has_a_tiny_family():
    recurrent = {TINY_FAMILIES[name].model_type for name in FAMILIES
                 if any(k.startswith("recurrent") for k in tiny_runner(name)._rollback.kinds)}
    assert recurrent == RECORDED_MODEL_TYPES and REFEED_MODEL_TYPES < RECORDED_MODEL_TYPES


@pytest.mark.parametrize("name", sorted(
    n for n in FAMILIES if TINY_FAMILIES[n].model_type in RECORDED_MODEL_TYPES - REFEED_MODEL_TYPES))
def test_a_model_proven_only_when_recorded_is_refused_lookup_when_re_fed(name):
    # Their chunked block forward differs from their one-token steps by 0.5-10 logits.
    runner = tiny_runner(name, recurrent="refeed")
    prompt = lcg_tokens(11, PROMPT_TOKENS, TINY_VOCAB)
    with pytest.raises(UnsupportedModelError) as err:
        generate(runner, prompt, max_tokens=4, lookup=POLICIES["fixed"])
    message = str(err.value)
    assert message.startswith(f"{TINY_FAMILIES[name].model_type}: its recurrent layers")
    assert "plain decoding works" in message and "\n" not in message
    assert len(generate(runner, prompt, max_tokens=4).tokens) == 4


def _tiny_bamba():
    from transformers import AutoConfig, AutoModelForCausalLM

    # bamba: even a recorded block's greedy choice differs from its one-token steps.
    config = AutoConfig.for_model(
        "bamba", vocab_size=TINY_VOCAB, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, attn_layer_indices=[1], num_attention_heads=2,
        num_key_value_heads=1, mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8,
        mamba_n_groups=1, mamba_chunk_size=8, mamba_expand=2)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float64).eval()


def test_an_unproven_recurrent_type_rolls_back_by_re_feeding_for_calibrate():
    # Lookup refuses it, but calibrate and the warm-up still roll blocks back on it; a type
    # whose code records nothing per token (zamba, zaya) could not be cropped.
    runner = TorchRunner(_tiny_bamba(), IdsOnlyTokenizer(), "cpu")
    assert runner.rollback_kind == "refeed" and runner.lookup_refusal is not None
    runner.reset()
    runner.prefill(lcg_tokens(11, PROMPT_TOKENS, TINY_VOCAB))
    runner.forward(lcg_tokens(12, BLOCK, TINY_VOCAB))
    assert runner.rollback(BLOCK - 1) == 1 and runner.cache_len() == PROMPT_TOKENS + 1


def test_a_recurrent_model_not_proven_either_way_is_refused_lookup_in_one_line():
    model = _tiny_bamba()
    for recurrent in ("record", "refeed"):
        runner = TorchRunner(model, IdsOnlyTokenizer(), "cpu", recurrent)  # type: ignore[arg-type]
        assert runner.lookup_refusal is not None and runner.lookup_refusal.startswith("bamba: ")
        with pytest.raises(UnsupportedModelError, match="^bamba: its recurrent layers"):
            generate(runner, [1, 2, 3, 4], max_tokens=4, lookup=POLICIES["fixed"])


@pytest.mark.parametrize("name", ["gemma3_text", "ministral3"])
def test_a_block_all_accepted_leaves_the_window_at_its_size(name):
    runner = tiny_runner(name)
    runner.reset()
    runner.prefill(lcg_tokens(11, PROMPT_TOKENS, TINY_VOCAB))
    runner.forward(lcg_tokens(12, BLOCK, TINY_VOCAB))  # every proposal landed: no rollback
    runner.forward([7])
    sliding = [layer for layer in runner._cache.layers if getattr(layer, "is_sliding", False)]
    assert sliding and all(
        layer.keys.shape[-2] == TINY_SLIDING_WINDOW - 1 and not layer.record_past
        for layer in sliding)


def test_a_trim_only_model_keeps_nothing_per_block():
    runner = tiny_runner("llama")
    runner.reset()
    runner.prefill([1, 2, 3])
    runner.forward([4, 5, 6])
    assert runner.rollback_kind == "trim" and runner._rollback._mark is None
