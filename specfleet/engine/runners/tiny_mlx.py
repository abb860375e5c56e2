"""Tiny seeded random-weight mlx-lm models, one per cache family, for exactness self-tests.

Each is built from mlx-lm's own model class (`mlx_lm.models.<arch>.Model`), so its caches
are the ones the real architecture makes: full attention (`KVCache`), sliding window
(`RotatingKVCache`, window 8 so a short reply wraps it), chunked attention
(`ChunkedKVCache`), and linear attention, short convolution or state space (`ArraysCache`)
beside or instead of attention. float32, 2-4 layers, hidden 48, vocab 96; no download and
no tokenizer (ids only). Weights are drawn wide (std `WIDE_GAIN / sqrt(fan_in)`, ~0.6 here)
so greedy choices do not sit on near-ties (ENVIRONMENT.md, "Added 2026-12-01"). Building
one takes tens of milliseconds."""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from specfleet.engine.runners.common import IdsOnlyTokenizer
from specfleet.engine.runners.mlx import MlxRunner, resolve_device
from specfleet.errors import UserError

VOCAB = 96
HIDDEN = 48
WINDOW = 8  # sliding window and attention chunk: prompt 24 + a short reply pass it
WIDE_GAIN = 4.0

_ATTENTION = dict(hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, vocab_size=VOCAB)

_QWEN3_5_TEXT = dict(
    _ATTENTION, model_type="qwen3_5_text", num_hidden_layers=4, full_attention_interval=2,
    linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
    linear_value_head_dim=8, linear_conv_kernel_dim=4, tie_word_embeddings=False,
    rope_parameters={"type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})
_MAMBA = dict(model_type="mamba", vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=96,
              state_size=8, num_hidden_layers=2, conv_kernel=4, use_bias=False,
              use_conv_bias=True, time_step_rank=4, tie_word_embeddings=True)

# arch -> ModelArgs.from_dict input; every value here is mlx-lm's own config key.
CONFIGS: dict[str, dict[str, Any]] = {
    "llama": dict(_ATTENTION, model_type="llama", num_hidden_layers=2, rms_norm_eps=1e-5,
                  tie_word_embeddings=True),
    "qwen3": dict(_ATTENTION, model_type="qwen3", num_hidden_layers=2, rms_norm_eps=1e-6,
                  max_position_embeddings=512, tie_word_embeddings=False, rope_theta=10000.0),
    "gemma3_text": dict(_ATTENTION, model_type="gemma3_text", num_hidden_layers=3,
                        num_key_value_heads=1, query_pre_attn_scalar=16,
                        sliding_window=WINDOW, sliding_window_pattern=3),
    "ministral3": dict(_ATTENTION, model_type="ministral3", num_hidden_layers=3,
                       rms_norm_eps=1e-5, max_position_embeddings=512, sliding_window=WINDOW,
                       layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                       rope_parameters={"type": "default", "rope_theta": 10000.0,
                                        "llama_4_scaling_beta": 0.1,
                                        "original_max_position_embeddings": 512}),
    "llama4": dict(model_type="llama4", text_config=dict(
        _ATTENTION, model_type="llama4_text", num_hidden_layers=4, attention_bias=False,
        attention_chunk_size=WINDOW, interleave_moe_layer_step=4, intermediate_size_mlp=2 * HIDDEN,
        max_position_embeddings=512, num_experts_per_tok=1, num_local_experts=2,
        rms_norm_eps=1e-5, rope_scaling=None, rope_theta=10000.0, use_qk_norm=True)),
    "qwen3_5": dict(model_type="qwen3_5", text_config=dict(_QWEN3_5_TEXT)),
    "nemotron_h": dict(_ATTENTION, model_type="nemotron_h", max_position_embeddings=512,
                       attention_bias=False, mamba_num_heads=4, mamba_head_dim=16,
                       mamba_proj_bias=False, ssm_state_size=16, conv_kernel=4, n_groups=1,
                       mlp_bias=False, layer_norm_epsilon=1e-5, use_bias=False,
                       use_conv_bias=True, hybrid_override_pattern=["M", "*", "M", "-"]),
    "lfm2": dict(model_type="lfm2", vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=3,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                 norm_eps=1e-5, conv_bias=False, conv_L_cache=3, block_dim=HIDDEN,
                 block_multiple_of=16, block_ffn_dim_multiplier=1.0,
                 block_auto_adjust_ff_dim=False, block_ff_dim=2 * HIDDEN, full_attn_idxs=[1]),
    "mamba2": dict(model_type="mamba2", num_heads=4, head_dim=16, vocab_size=VOCAB,
                   hidden_size=HIDDEN, intermediate_size=64, state_size=16, num_hidden_layers=2,
                   layer_norm_epsilon=1e-5, conv_kernel=4, n_groups=1, use_bias=False,
                   use_conv_bias=True, tie_word_embeddings=True,
                   time_step_limit=(0.0, float("inf")), time_step_rank="auto"),
    "lfm2_moe": dict(model_type="lfm2_moe", vocab_size=VOCAB, hidden_size=HIDDEN,
                     intermediate_size=2 * HIDDEN, moe_intermediate_size=HIDDEN,
                     num_hidden_layers=3, num_experts=2, num_experts_per_tok=1,
                     norm_topk_prob=True, num_attention_heads=4, num_key_value_heads=2,
                     max_position_embeddings=512, use_expert_bias=False, num_dense_layers=1,
                     norm_eps=1e-5, conv_bias=False, conv_L_cache=3, full_attn_idxs=[1]),
    "granitemoehybrid": dict(_ATTENTION, model_type="granitemoehybrid", num_hidden_layers=2,
                             max_position_embeddings=512, attention_bias=False,
                             embedding_multiplier=1.0, attention_multiplier=0.25,
                             logits_scaling=1.0, residual_multiplier=1.0,
                             layer_types=["mamba", "attention"], rms_norm_eps=1e-5,
                             shared_intermediate_size=2 * HIDDEN, mamba_n_heads=4,
                             mamba_d_head=24, mamba_proj_bias=False, mamba_d_state=16,
                             mamba_d_conv=4, mamba_n_groups=1, mamba_conv_bias=True),
    "falcon_h1": dict(_ATTENTION, model_type="falcon_h1", num_hidden_layers=2,
                      mamba_chunk_size=8, mamba_d_head=16, mamba_d_ssm=64, mamba_d_state=8,
                      mamba_n_heads=4, mamba_n_groups=1, max_position_embeddings=512,
                      rope_theta=10000.0),
    "olmo_hybrid": dict(_ATTENTION, model_type="olmo_hybrid", num_hidden_layers=2,
                        rms_norm_eps=1e-6, max_position_embeddings=512, linear_num_key_heads=2,
                        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                        linear_conv_kernel_dim=4, linear_allow_neg_eigval=False,
                        tie_word_embeddings=False, attention_bias=False,
                        layer_types=["linear_attention", "full_attention"]),
    "kimi_linear": dict(model_type="kimi_linear", vocab_size=VOCAB, hidden_size=HIDDEN,
                        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                        intermediate_size=2 * HIDDEN, head_dim=16, rope_theta=10000.0,
                        rms_norm_eps=1e-6, model_max_length=512, num_experts=2,
                        moe_intermediate_size=HIDDEN, kv_lora_rank=16, qk_nope_head_dim=8,
                        qk_rope_head_dim=8, v_head_dim=16, first_k_dense_replace=2,
                        linear_attn_config={"kda_layers": [1], "num_heads": 4, "head_dim": 8,
                                            "short_conv_kernel_size": 4}),
    "mamba": dict(_MAMBA),
    "falcon_mamba": dict(_MAMBA, model_type="falcon_mamba"),  # mlx-lm's mamba module
    "jamba": dict(_ATTENTION, model_type="jamba", num_hidden_layers=2, attn_layer_offset=1,
                  attn_layer_period=2, expert_layer_offset=1, expert_layer_period=100,
                  mamba_d_conv=4, mamba_d_state=8, mamba_expand=2, num_experts=1,
                  num_experts_per_tok=1, rms_norm_eps=1e-6, max_position_embeddings=512),
    "qwen3_next": dict(_ATTENTION, model_type="qwen3_next", num_hidden_layers=2,
                       linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
                       linear_value_head_dim=8, linear_conv_kernel_dim=4, num_experts=2,
                       num_experts_per_tok=1, decoder_sparse_step=1,
                       shared_expert_intermediate_size=HIDDEN, mlp_only_layers=[0, 1],
                       moe_intermediate_size=HIDDEN, rms_norm_eps=1e-6, rope_theta=10000.0,
                       partial_rotary_factor=0.5, max_position_embeddings=512,
                       full_attention_interval=2, tie_word_embeddings=False),
    "qwen3_5_moe": dict(model_type="qwen3_5_moe", text_config=dict(
        _QWEN3_5_TEXT, model_type="qwen3_5_moe_text", num_experts=2, num_experts_per_tok=1,
        moe_intermediate_size=HIDDEN, shared_expert_intermediate_size=HIDDEN)),
}


def build_model(arch: str) -> nn.Module:
    """mlx-lm's `Model` of `arch` from `CONFIGS`, weights drawn wide from MLX's global seed."""
    from mlx_lm.utils import MODEL_REMAPPING  # a type built from another's module (falcon_mamba)

    module = importlib.import_module(f"mlx_lm.models.{MODEL_REMAPPING.get(arch, arch)}")
    model = module.Model(module.ModelArgs.from_dict(CONFIGS[arch]))
    params = []
    for name, value in tree_flatten(model.parameters()):
        # Matrices and convolutions are drawn wide; norms, biases and SSM constants keep
        # their library init (A_log and dt_bias stay in their stable range).
        if value.ndim >= 2 and mx.issubdtype(value.dtype, mx.floating):
            fan_in = math.prod(value.shape[1:])
            value = mx.random.normal(value.shape) * (WIDE_GAIN / math.sqrt(fan_in))
        params.append((name, value.astype(mx.float32)))
    model.update(tree_unflatten(params))
    mx.eval(model.parameters())
    return model


TINY_FAMILIES: dict[str, Callable[[], nn.Module]] = {
    arch: partial(build_model, arch) for arch in CONFIGS
}


def tiny_runner(family: str, device: str = "cpu", seed: int = 0) -> MlxRunner:
    """A runner over the tiny seeded model of `family`.

    Args:
        family: a key of `TINY_FAMILIES`.
        device: "auto", "cpu", "metal" or "cuda".
        seed: MLX's random seed for the weights (same seed, same model).

    Returns:
        An `MlxRunner` without EOS, vocab `VOCAB`.
    """
    if family not in TINY_FAMILIES:
        raise UserError(f"tiny MLX family must be one of {', '.join(TINY_FAMILIES)}, got {family!r}")
    resolved = resolve_device(device)
    mx.set_default_device(mx.cpu if resolved == "cpu" else mx.gpu)
    mx.random.seed(seed)
    return MlxRunner(TINY_FAMILIES[family](), IdsOnlyTokenizer(), resolved)


def self_test_runner(family: str, device: str = "cpu") -> MlxRunner:
    """The runner a worker's start-up self-test uses (`workers/selftest.py`): float32, seed 0."""
    return tiny_runner(family, device)
