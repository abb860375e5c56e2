"""The rollback rules a mutation run found unstated (tools/mutations.py --group rules): a model
with a sliding window beside recurrent layers rolls back by re-feeding, and its window gets
back the tensors it held before the block."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import torch

from specfleet.engine.runners.common import IdsOnlyTokenizer
from specfleet.engine.runners.tiny_torch import _COMMON, TINY_SLIDING_WINDOW, TINY_VOCAB
from specfleet.engine.runners.torch import TorchRunner
from specfleet.engine.runners.toy import lcg_tokens

PROMPT_TOKENS = 24
BLOCK = 12  # wider than the sliding window (8)


def _tiny_lfm3() -> TorchRunner:
    """LFM3's short convolution and a sliding window layer: no tiny family has both. Lookup
    refuses the type (unproven), but calibrate and the warm-up roll its blocks back by
    re-feeding."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("lfm3", **{
        **_COMMON, "num_hidden_layers": 2, "sliding_window": TINY_SLIDING_WINDOW,
        "layer_types": ["conv", "sliding_attention"]})
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float64).eval()
    return TorchRunner(model, IdsOnlyTokenizer(), "cpu")


@pytest.fixture(scope="module")
def runner() -> Iterator[TorchRunner]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield _tiny_lfm3()
    torch.set_num_threads(threads)


def _next_row(runner: TorchRunner, prompt: list[int], fed: list[int]) -> np.ndarray:
    runner.reset()
    runner.prefill(prompt)
    if fed:
        runner.forward(fed)
    return runner.read_row(runner.forward([7]), 0)


@pytest.mark.parametrize("n", [BLOCK - 1, BLOCK // 2, 1])
def test_a_re_fed_window_gets_back_what_it_held_before_the_block(runner, n) -> None:
    assert runner.rollback_kind == "refeed" and runner._rollback.kinds == ("recurrent", "sliding")
    prompt = lcg_tokens(11, PROMPT_TOKENS, TINY_VOCAB)
    block = lcg_tokens(12, BLOCK, TINY_VOCAB)
    kept = block[: BLOCK - n]
    expected = _next_row(runner, prompt, kept)
    runner.reset()
    runner.prefill(prompt)
    runner.forward(block)
    assert runner.rollback(n) == len(kept)
    assert runner.cache_len() == PROMPT_TOKENS + len(kept)
    # A window left holding the block's last entries keeps its size and count: only the next
    # row tells the rolled back block from one never fed.
    np.testing.assert_allclose(runner.read_row(runner.forward([7]), 0), expected, rtol=0, atol=1e-9)
