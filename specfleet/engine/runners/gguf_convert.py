"""Convert the bundled GGUF (llama architecture) into folders the runners load.

Two forms (facts measured here: /work/shared/ENVIRONMENT.md):
- `gguf_to_hf_folder`: dequantized float32 Hugging Face folder (safetensors, tokenizer, chat
  template). torch loads it; MLX loads the same folder in float32 (logits within 1e-4).
- `gguf_to_mlx_q4_folder`: the GGUF's own 4-bit (Q4_1) / 8-bit (Q8_0) blocks as MLX affine
  quantized weights, group 32 — the exact weights, what a Metal host would run. Skipped
  (returns False) when MLX is not installed.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import cast

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
# GGUF tensor names -> llama (HF / mlx-lm) names.
_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_BLOCK_RE = re.compile(r"^blk\.(\d+)\.([a-z_]+)\.(weight|scales|biases)$")
_GLOBAL_RE = re.compile(r"^([a-z_]+)\.(weight|scales|biases)$")
GROUP_SIZE = 32


def gguf_to_hf_folder(gguf: Path, out: Path) -> None:
    """Dequantize `gguf` into a float32 HF folder at `out` (about 25 s, 517 MB here).

    transformers 5 writes `rope_theta` only inside `rope_parameters`; mlx-lm reads the
    top-level key and silently falls back to 10000, so it is copied up (both still load).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent,
        gguf_file=gguf.name,
        dtype=torch.float32,
        # Without dequantize=True the model refuses save_pretrained ("not serializable").
        quantization_config=GgufConfig(dequantize=True),
    )
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _lift_rope_theta(out / "config.json")


def _lift_rope_theta(config_path: Path) -> None:
    config = json.loads(config_path.read_text())
    rope = config.get("rope_parameters") or {}
    if "rope_theta" not in config and "rope_theta" in rope:
        config["rope_theta"] = rope["rope_theta"]
    config_path.write_text(json.dumps(config, indent=2) + "\n")


def gguf_to_mlx_q4_folder(gguf: Path, hf_folder: Path, out: Path) -> bool:
    """Write the GGUF's exact quantized weights as an mlx-lm folder at `out`.

    Returns:
        False when MLX is not installed (nothing written), True otherwise.
    """
    try:
        import mlx.core as mx
    except ImportError:
        return False
    # Without return_metadata, loading a GGUF gives name -> array (the stub allows any form).
    raw = cast("dict[str, mx.array]", mx.load(str(gguf)))
    weights = {_llama_name(name): value for name, value in raw.items()}
    out.mkdir(parents=True)
    mx.save_safetensors(str(out / "model.safetensors"), weights, metadata={"format": "mlx"})
    config = json.loads((hf_folder / "config.json").read_text())
    # GGUF stores Q/K rows permuted for interleaved rotary: use MLX's traditional RoPE.
    config["rope_traditional"] = True
    config["quantization"] = _quantization_block(weights)
    config.pop("dtype", None)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    for name in TOKENIZER_FILES + ("generation_config.json",):
        if (hf_folder / name).is_file():
            shutil.copy2(hf_folder / name, out / name)
    return True


def _llama_name(name: str) -> str:
    if match := _BLOCK_RE.match(name):
        layer, part, kind = match.groups()
        return f"model.layers.{layer}.{_BLOCK_NAMES[part]}.{kind}"
    if match := _GLOBAL_RE.match(name):
        part, kind = match.groups()
        return f"{_GLOBAL_NAMES[part]}.{kind}"
    raise ValueError(f"unexpected GGUF tensor {name!r}")


def _quantization_block(weights) -> dict:
    """Default 4-bit, plus an explicit entry for every layer stored with other bits (Q8_0)."""
    block: dict = {"group_size": GROUP_SIZE, "bits": 4}
    for name, scales in weights.items():
        if not name.endswith(".scales"):
            continue
        layer = name[: -len(".scales")]
        in_features = scales.shape[-1] * GROUP_SIZE
        bits = weights[f"{layer}.weight"].shape[-1] * 32 // in_features
        if bits != 4:
            block[layer] = {"group_size": GROUP_SIZE, "bits": bits}
    return block
