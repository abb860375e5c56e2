"""Tiny seeded transformers models, one per cache family, for self-tests without a download.

Each is built from transformers' own model code and config class (`AutoConfig.for_model`)
with random weights from a fixed seed: 2-3 layers, hidden 32, vocab `TINY_VOCAB`, driven by
token ids (no tokenizer files, no EOS). Weights are drawn wide
(`initializer_range` 0.5): with the usual 0.02 a tiny model's logits are near-ties and a
width-dependent rounding would flip greedy choices. Sliding windows are 8 tokens, so a short
reply already runs past them. A worker can build any of them in well under a second and check
that prompt lookup replies exactly as plain decoding on that cache family.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch

from specfleet.engine.runners.common import IdsOnlyTokenizer
from specfleet.engine.runners.torch import TorchRunner, resolve_device, torch_device
from specfleet.engine.runners.torch_rollback import RecurrentRollback
from specfleet.errors import UserError

TINY_VOCAB = 96
TINY_SLIDING_WINDOW = 8

# Shared by every family; `for_model` ignores what a config class does not know.
_COMMON: Mapping[str, Any] = MappingProxyType({
    "vocab_size": TINY_VOCAB, "hidden_size": 32, "intermediate_size": 64,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16,
    "initializer_range": 0.5, "tie_word_embeddings": False,
    "bos_token_id": None, "eos_token_id": None, "pad_token_id": None,
})


@dataclass(frozen=True)
class TinyFamily:
    """How one tiny model is built.

    Attributes:
        model_type: transformers' `model_type`.
        layers: the cache layers it gets, in words.
        config: settings over the common tiny ones.
        float64: whether it builds in float64; a family that cannot is built in float32.
    """

    model_type: str
    layers: str
    config: Mapping[str, Any] = field(default_factory=dict)
    float64: bool = True  # False: its kernels have no float64 (torch's grouped expert matmul)


_LINEAR_HEADS = {"linear_key_head_dim": 8, "linear_value_head_dim": 8,
                 "linear_num_key_heads": 2, "linear_num_value_heads": 2}

TINY_FAMILIES: Mapping[str, TinyFamily] = MappingProxyType({
    "llama": TinyFamily("llama", "full attention", {"num_hidden_layers": 2}),
    "qwen3": TinyFamily("qwen3", "full attention", {"num_hidden_layers": 2}),
    "gemma3_text": TinyFamily("gemma3_text", "sliding window + full attention", {
        "num_hidden_layers": 2, "sliding_window": TINY_SLIDING_WINDOW,
        "layer_types": ["sliding_attention", "full_attention"]}),
    "ministral3": TinyFamily("ministral3", "sliding window on every layer", {
        "num_hidden_layers": 2, "sliding_window": TINY_SLIDING_WINDOW}),
    "qwen3_next": TinyFamily("qwen3_next", "gated delta net (linear attention) + full", {
        "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
        "mlp_only_layers": [0, 1], **_LINEAR_HEADS}),
    "qwen3_5_text": TinyFamily("qwen3_5_text", "gated delta net (linear attention) + full", {
        "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
        **_LINEAR_HEADS}),
    "lfm2": TinyFamily("lfm2", "short convolution + full attention", {
        "num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"],
        "block_auto_adjust_ff_dim": False}),
    "nemotron_h": TinyFamily("nemotron_h", "Mamba 2 + full attention + MLP-only", {
        "num_hidden_layers": 3, "layers_block_type": ["mamba", "attention", "mlp"],
        "mamba_num_heads": 4, "mamba_head_dim": 8, "ssm_state_size": 8, "n_groups": 1,
        "chunk_size": 8}),
    "mamba2": TinyFamily("mamba2", "Mamba 2 on every layer (no attention)", {
        "num_hidden_layers": 2, "num_heads": 4, "head_dim": 16, "state_size": 8,
        "n_groups": 1, "chunk_size": 8}),
    # Prompt lookup on these and the ones below needs transformers 5.25+ ("record" rollback).
    "mamba": TinyFamily("mamba", "Mamba on every layer (no attention)", {
        "num_hidden_layers": 2, "state_size": 8, "expand": 2, "conv_kernel": 4,
        "time_step_rank": 4}),
    "falcon_mamba": TinyFamily("falcon_mamba", "Mamba with normed B, C, dt (no attention)", {
        "num_hidden_layers": 2, "state_size": 8, "expand": 2, "conv_kernel": 4,
        "time_step_rank": 4}),
    "jamba": TinyFamily("jamba", "Mamba + full attention", {
        "num_hidden_layers": 2, "attn_layer_period": 2, "attn_layer_offset": 1,
        "expert_layer_period": 100, "expert_layer_offset": 99, "num_experts": 1,
        "mamba_d_state": 8, "mamba_dt_rank": 4, "mamba_expand": 2}),
    "qwen3_5_moe_text": TinyFamily("qwen3_5_moe_text", "gated delta net + full, experts", {
        "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
        "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
        "shared_expert_intermediate_size": 32, **_LINEAR_HEADS}, float64=False),
    "lfm2_moe": TinyFamily("lfm2_moe", "short convolution + full attention, experts", {
        "num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"],
        "num_experts": 2, "num_experts_per_tok": 1, "moe_intermediate_size": 32,
        "num_dense_layers": 1}, float64=False),
    "olmo_hybrid": TinyFamily("olmo_hybrid", "gated delta net + full attention", {
        "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
        **_LINEAR_HEADS}),
    "zamba2": TinyFamily("zamba2", "Mamba 2 + a shared attention block", {
        "num_hidden_layers": 2, "layers_block_type": ["mamba", "hybrid"], "mamba_d_state": 8,
        "mamba_headdim": 8, "n_mamba_heads": 8, "mamba_ngroups": 1, "chunk_size": 8,
        "hybrid_layer_ids": [1], "num_mem_blocks": 1, "attention_head_dim": 16}),
    "kimi_linear": TinyFamily("kimi_linear", "Kimi delta attention + MLA full attention", {
        "num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"],
        "mlp_layer_types": ["dense", "dense"], "num_key_value_heads": 2, "linear_num_heads": 2,
        "linear_head_dim": 8, "linear_conv_kernel_dim": 4, "qk_nope_head_dim": 8,
        "qk_rope_head_dim": 8, "qk_head_dim": 16, "v_head_dim": 16, "kv_lora_rank": 16,
        "q_lora_rank": None}),
    "falcon_h1": TinyFamily("falcon_h1", "Mamba 2 beside attention in every layer", {
        "num_hidden_layers": 2, "mamba_n_heads": 4, "mamba_d_head": 16, "mamba_d_ssm": 64,
        "mamba_d_state": 8, "mamba_n_groups": 1, "mamba_chunk_size": 8}),
    "granitemoehybrid": TinyFamily("granitemoehybrid", "Mamba 2 + full attention", {
        "num_hidden_layers": 2, "layer_types": ["mamba", "attention"], "mamba_n_heads": 4,
        "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 1, "mamba_chunk_size": 8,
        "num_local_experts": 0}),
})


def tiny_model(family: str, dtype: torch.dtype = torch.float64, seed: int = 0):
    """The seeded random-weight `PreTrainedModel` of `family` (a key of `TINY_FAMILIES`), in eval mode."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if family not in TINY_FAMILIES:
        raise UserError(
            f"tiny torch family must be one of {', '.join(TINY_FAMILIES)}, got {family!r}")
    spec = TINY_FAMILIES[family]
    if dtype == torch.float64 and not spec.float64:
        dtype = torch.float32
    config = AutoConfig.for_model(spec.model_type, **{**_COMMON, **spec.config})
    with torch.random.fork_rng(devices=[]):  # seeded weights without moving the caller's RNG
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()


def tiny_runner(family: str, device: str = "cpu", dtype: torch.dtype = torch.float64,
                seed: int = 0, recurrent: RecurrentRollback | None = None) -> TorchRunner:
    """A `TorchRunner` over `tiny_model(family, dtype, seed)` on `device`, ids only.

    Args:
        family: a key of `TINY_FAMILIES`.
        device: "auto" or one of torch's devices (`engine/kinds.ENGINE_DEVICES`).
        dtype: weight dtype; float64 keeps a verify row within ~1e-5 of its one-token step
            (the model code computes some parts in float32). MPS has no float64: float32 there.
        seed: weight seed.
        recurrent: how recurrent layers go back (`TorchRunner`); None: the way for the
            family's model type and the installed transformers.

    Returns:
        The runner: token ids in and out (`IdsOnlyTokenizer`), no EOS.
    """
    resolved = resolve_device(device)
    if resolved == "mps" and dtype == torch.float64:
        dtype = torch.float32
    model = tiny_model(family, dtype, seed)
    model.to(torch_device(resolved))
    return TorchRunner(model, IdsOnlyTokenizer(), resolved, recurrent)


def self_test_runner(family: str, device: str = "cpu") -> TorchRunner:
    """The runner a worker's start-up self-test uses (`workers/selftest.py`): float32, the
    precision real runs use on accelerators, and several times faster than float64 through
    the reference kernels of the hybrid layers on a CPU."""
    return tiny_runner(family, device, torch.float32)
