"""`weight_bytes()` of the torch and MLX runners against a count by hand of the tiny llamas
(`tiny_torch`, `tiny_mlx`): what one plain step reads, for the bandwidth ceiling."""

from __future__ import annotations

import pytest


def _llama_layer(hidden: int, q_out: int, kv_out: int, ffn: int) -> int:
    """Parameters of one llama layer: q, k, v, o, gate, up, down and two norms."""
    return hidden * q_out + 2 * hidden * kv_out + q_out * hidden + 3 * hidden * ffn + 2 * hidden


def test_torch_tiny_llama_counts_every_parameter_at_its_dtype():
    torch = pytest.importorskip("torch")
    from specfleet.engine.runners.tiny_torch import tiny_runner

    # hidden 32, 2 heads of 16 (q 32), 1 KV head (16), ffn 64, vocab 96, untied, 2 layers
    params = 2 * _llama_layer(32, 32, 16, 64) + 96 * 32 * 2 + 32
    assert params == 24736
    assert tiny_runner("llama").weight_bytes() == params * 8  # float64
    assert tiny_runner("llama", dtype=torch.float32).weight_bytes() == params * 4


def test_torch_tied_embedding_counts_once():
    pytest.importorskip("torch")
    from specfleet.engine.runners.tiny_torch import tiny_runner

    runner = tiny_runner("llama")
    untied = runner.weight_bytes()
    runner.model.lm_head.weight = runner.model.model.embed_tokens.weight
    assert runner.weight_bytes() == untied - 96 * 32 * 8


@pytest.mark.mlx
def test_mlx_tiny_llama_float32_and_quantized_at_packed_size():
    pytest.importorskip("mlx.core")
    import mlx.nn as nn

    from specfleet.engine.runners.tiny_mlx import tiny_runner

    # hidden 48, 4 heads of 16 (q 64), 2 KV heads (32), ffn 96, vocab 96, tied, 2 layers
    params = 2 * _llama_layer(48, 64, 32, 96) + 96 * 48 + 48
    runner = tiny_runner("llama")
    assert runner.weight_bytes() == params * 4 == 203712
    # 4-bit, group 32, where the input width allows it (o_proj 64, down_proj 96): a
    # (out, in) matrix becomes in/8 uint32 words a row plus float32 scales and biases
    # per group of 32: out * in * (1/2 + 2 * 4/32) bytes instead of out * in * 4.
    nn.quantize(runner.model, group_size=32, bits=4,
                class_predicate=lambda _, m: isinstance(m, nn.Linear)
                and m.weight.shape[-1] % 32 == 0)
    saved = 2 * sum(out * inp * 4 - out * inp * 3 // 4 for out, inp in ((48, 64), (48, 96)))
    assert runner.weight_bytes() == params * 4 - saved == 153792
