"""Convert a bundled GGUF (SmolLM2's llama, Gemma 3's gemma3) into folders the runners load.

Two forms (facts measured here: /work/shared/ENVIRONMENT.md):
- `gguf_to_hf_folder`: dequantized float32 Hugging Face folder (safetensors, tokenizer, chat
  template when the model has one). torch loads it; MLX loads the same folder in float32.
- `gguf_to_mlx_q4_folder`: the GGUF's own 4-bit (Q4_1) / 8-bit (Q8_0) blocks as MLX affine
  quantized weights, group 32 — the exact weights, what a Metal host would run. Llama names
  only, and only for files whose every block MLX loads (SmolLM2's Q4_1; `mx.load` refuses
  Gemma 3's Q4_K_M mix of Q5_0/Q4_K/Q6_K). Skipped (returns False) when MLX is not installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import cast

from specfleet.engine.runners.folders import lift_rope_keys

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
    """Dequantize `gguf` into a float32 HF folder at `out` (SmolLM2 ~25 s, 517 MB; Gemma 3
    270M ~70 s, 1.1 GB here).

    transformers 5 writes the RoPE bases only inside `rope_parameters`; mlx-lm reads top-level
    keys and silently falls back to its defaults, so they are copied up (`lift_rope_keys`).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    bars_only_in_a_terminal()
    with _one_gguf_reader():
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
    config_path = out / "config.json"
    config_path.write_text(json.dumps(lift_rope_keys(json.loads(config_path.read_text())),
                                      indent=2) + "\n")


def bars_only_in_a_terminal() -> None:
    """Turn transformers' progress bars off where stderr is no terminal: each redraws with a
    `\r`, and `models fetch 2>&1 | tail` or a log got hundreds of them."""
    if not sys.stderr.isatty():
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


@contextlib.contextmanager
def _one_gguf_reader() -> Iterator[None]:
    """Share one `gguf.GGUFReader` per file while transformers loads it.

    For an architecture its fast reader does not cover (Gemma 3), transformers 5.24 parses the
    whole file for the config, the weights and the tokenizer's config: ~20 s each for a
    262k-token vocabulary here (90 s of CPU with three parses, 52 s with one).
    """
    import gguf as gguf_py

    reader_class = gguf_py.GGUFReader
    readers: dict[str, object] = {}

    def shared(path, *args, **kwargs):
        key = os.path.realpath(path)
        if args or kwargs:  # another mode than a read-only parse: not shared
            return reader_class(path, *args, **kwargs)
        if key not in readers:
            readers[key] = reader_class(path)
        return readers[key]

    # transformers imports the name from `gguf` at each call: a stand-in for the class.
    gguf_py.GGUFReader = shared  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        gguf_py.GGUFReader = reader_class  # type: ignore[misc]


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
