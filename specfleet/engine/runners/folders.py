"""What a model folder needs before an engine can load it: the weights, a tokenizer and a
`model_type` the engine's library knows, checked without loading anything. `matrix
validate`, `matrix run` and `generate` ask this before a model loads, so a folder no run
could load is one line rather than a stored matrix of failed runs. Also the config keys
mlx-lm must be handed on loading a folder that transformers 5 wrote (`mlx_config_overrides`).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from typing import Any

from specfleet.engine.kinds import MODEL_ENGINES
from specfleet.userfiles import json_object, kind_of

# What a model's weights are stored in (the registry sizes and hashes these files).
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".npz")
# What an engine loads a folder's weights from (sharded files match too): not a GGUF.
WEIGHT_PATTERNS = tuple(f"*{suffix}" for suffix in WEIGHT_SUFFIXES if suffix != ".gguf")
# Any file a Hugging Face tokenizer loads from (sentencepiece models, BPE and WordPiece
# vocabularies, tiktoken ranks), or its config: a folder is refused only when it has none.
TOKENIZER_PATTERNS = ("tokenizer.json", "tokenizer_config.json", "*.model", "vocab.json",
                      "vocab.txt", "*.tiktoken")
# The JSON files beside config.json that transformers and mlx-lm read as objects: a list,
# number or null in one was a TypeError traceback from inside the library.
JSON_OBJECT_FILES = ("generation_config.json", "tokenizer.json", "tokenizer_config.json",
                     "special_tokens_map.json", "added_tokens.json")


def weights_problem(folder: Path) -> str | None:
    """`holds no weights; expected ...` for a model folder without weight files, or what one
    of its weight names is when that is no file (a named pipe would hang the first read);
    else None."""
    for path in sorted(p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern)):
        if not path.is_file():
            try:
                kind = kind_of(path.stat().st_mode)
            except OSError:  # a link to nothing
                kind = "a link to nothing"
            return f"holds {path.name}, {kind}, not a file; expected the model's weights"
    if _holds(folder, WEIGHT_PATTERNS):
        return None
    return "holds no weights; expected the model's *.safetensors beside its config.json"


def folder_problem(folder: Path, engine: str) -> str | None:
    """Why `engine` could not load the model folder `folder`, or None when it looks loadable.

    Args:
        folder: a folder holding config.json.
        engine: "torch" or "mlx" (any other engine is not checked).

    Returns:
        One sentence naming what is missing and what is expected.
    """
    if engine not in MODEL_ENGINES:
        return None
    if weightless := weights_problem(folder):
        return f"{folder} {weightless}"
    if not _holds(folder, TOKENIZER_PATTERNS):
        return (f"{folder} holds no tokenizer; expected tokenizer.json (or tokenizer.model) "
                "beside its config.json")
    config = _config(folder)
    model_type = config.get("model_type")
    if isinstance(model_type, str) and not knows_model_type(engine, model_type):
        return (f"{folder}: model_type {model_type!r} is an architecture the {engine} engine "
                f"does not know; expected one its library ({_LIBRARY[engine]}) implements")
    quantized = config.get("quantization")
    if engine == "torch" and isinstance(quantized, dict) and "bits" in quantized:
        return (f"{folder} holds MLX-quantized weights ({quantized['bits']}-bit), which only "
                "the mlx engine loads; expected float (or transformers-quantized) weights for torch")
    if engine == "mlx":
        try:
            lift_rope_keys(config)
        except ValueError as err:
            return f"{folder / 'config.json'}: {err}"
    return json_files_problem(folder) or safetensors_problem(folder)


# safetensors' own bound on a header (its JSON index of tensors); real ones are KB to MB.
MAX_SAFETENSORS_HEADER = 100_000_000


def safetensors_problem(folder: Path) -> str | None:
    """Why one of the folder's *.safetensors files is no safetensors file (its 8-byte header
    length past the file, or a header that is no JSON object), read without loading a
    tensor: such a folder failed every run of a stored matrix; None when each one is."""
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with path.open("rb") as weights:
                size = os.fstat(weights.fileno()).st_size
                length = int.from_bytes(weights.read(8), "little") if size >= 8 else -1
                fits = 0 < length <= min(size - 8, MAX_SAFETENSORS_HEADER)
                header = weights.read(length) if fits else b""
        except OSError as err:
            return f"{path}: cannot read ({err.strerror}); expected the model's weights"
        if not fits or not isinstance(json_object(header)[0], dict):
            said = (f"its header of {length} bytes is no JSON object" if fits else
                    f"its first 8 bytes give a header of {max(length, 0)} bytes in a file of "
                    f"{size}")
            return (f"{path} is no safetensors file ({said}); expected the model's weights as "
                    "safetensors writes them")
    return None


def has_chat_template(folder: Path) -> bool:
    """Whether the folder's tokenizer carries a chat template (`chat_template.jinja`, or the
    key in tokenizer_config.json), read without loading it."""
    if (folder / "chat_template.jinja").is_file():
        return True
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("chat_template"))


def json_files_problem(folder: Path) -> str | None:
    """Why one of the folder's `JSON_OBJECT_FILES` is no JSON object, naming it; None when
    each one there is."""
    for name in JSON_OBJECT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        try:
            raw = path.read_bytes()
        except OSError as err:
            return f"{path}: cannot read ({err.strerror}); expected a JSON object"
        problem = json_object(raw)[1]
        if problem is not None:
            return f"{path}: {problem}"
    return None


_LIBRARY = {"torch": "transformers", "mlx": "mlx-lm"}
_MODULE = {"torch": "transformers", "mlx": "mlx_lm"}
# The mlx-lm model module that loads a text-only model_type transformers 5 saves (the
# ...ForCausalLM of a model whose checkpoints are multimodal), where mlx-lm has none of that
# name: its ModelArgs takes a config without `text_config` as the text config itself.
MLX_MODEL_TYPES = {"qwen3_5_text": "qwen3_5"}


def library_installed(engine: str) -> bool:
    """Whether the model library behind `engine` (a real one) is installed here."""
    return importlib.util.find_spec(_MODULE[engine]) is not None


def knows_model_type(engine: str, model_type: str) -> bool:
    """Whether the library behind `engine` has an implementation of `model_type` (True where
    the library is not installed: the missing engine is said on its own)."""
    if not library_installed(engine):
        return True
    if engine == "torch":
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        return model_type in CONFIG_MAPPING_NAMES
    from mlx_lm.utils import MODEL_REMAPPING  # as mlx-lm's loader names a model's module

    module = MODEL_REMAPPING.get(model_type, MLX_MODEL_TYPES.get(model_type, model_type))
    if not module.isidentifier():  # mlx-lm imports `mlx_lm.models.<model_type>`
        return False
    return importlib.util.find_spec(f"mlx_lm.models.{module}") is not None


def _holds(folder: Path, patterns: tuple[str, ...]) -> bool:
    return any(next(folder.glob(pattern), None) is not None for pattern in patterns)


def mlx_config_overrides(folder: Path) -> dict[str, Any]:
    """What to hand `mlx_lm.load(..., model_config=...)` for `folder`: the keys
    `lift_rope_keys` adds to its config.json. Without them mlx-lm silently takes its defaults
    for a folder that transformers 5 saved (a llama's RoPE base 10000 where the model's is
    100000): another model, replying otherwise than torch. A text-only `model_type` mlx-lm
    loads under another name (`MLX_MODEL_TYPES`) is renamed.

    Raises:
        ValueError: the config's layer types are a layout mlx-lm cannot express.
    """
    config = _config(folder)
    overrides = {key: value for key, value in lift_rope_keys(config).items() if key not in config}
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in MLX_MODEL_TYPES:
        overrides["model_type"] = MLX_MODEL_TYPES[model_type]
    return overrides


def lift_rope_keys(config: dict) -> dict:
    """`config` plus the top-level keys mlx-lm 0.32 reads (transformers 5 still loads it).

    A single `rope_parameters` gives `rope_theta`, `partial_rotary_factor` and, for a scaled
    RoPE (llama3, yarn...), `rope_scaling`; one per layer type (Gemma 3) gives `rope_theta`
    (full attention) and `rope_local_base_freq` (sliding). `layer_types` gives Gemma's
    `sliding_window_pattern` (every Nth layer full), which must describe them exactly, and
    the hybrids' `full_attention_interval`; LFM2's feed-forward width is its `hidden_size`.
    """
    out = dict(config)
    rope = config.get("rope_parameters")
    rope = rope if isinstance(rope, dict) else {}
    full, local = rope.get("full_attention"), rope.get("sliding_attention")
    if isinstance(full, dict) and isinstance(local, dict):
        _lift(out, "rope_theta", full.get("rope_theta"))
        _lift(out, "rope_local_base_freq", local.get("rope_theta"))
        rope = full  # its scaling (Gemma 3 4B's linear factor) is the full layers'
    else:
        _lift(out, "rope_theta", rope.get("rope_theta"))
        _lift(out, "partial_rotary_factor", rope.get("partial_rotary_factor"))
    if rope.get("rope_type", "default") != "default":
        _lift(out, "rope_scaling", dict(rope))
    layer_types = config.get("layer_types")
    if not isinstance(layer_types, list) or not all(isinstance(t, str) for t in layer_types):
        layer_types = []  # another shape: the library says what is wrong with it
    if {"sliding_attention", "full_attention"} <= set(layer_types) and \
            out.get("sliding_window_pattern") is None:
        out["sliding_window_pattern"] = _sliding_window_pattern(layer_types)
    if {"linear_attention", "full_attention"} <= set(layer_types):
        _lift(out, "full_attention_interval", _full_every(layer_types))
    if config.get("model_type") in ("lfm2", "lfm2_moe"):
        _lift(out, "block_dim", config.get("hidden_size"))
    return out


def _lift(config: dict, key: str, value: Any) -> None:
    """Set `key` where config.json lacks it (or holds null), to a value that is there."""
    if value is not None and config.get(key) is None:
        config[key] = value


def _sliding_window_pattern(layer_types: list[str]) -> int:
    every = _full_every(layer_types)
    if every is None:  # mlx-lm would place the full layers elsewhere
        raise ValueError(f"layer_types {layer_types} are not every "
                         f"{layer_types.index('full_attention') + 1}th layer full; expected a "
                         "layout mlx-lm can build")
    return every


def _full_every(layer_types: list[str]) -> int | None:
    """N where every Nth layer (and only those) is `full_attention`, else None."""
    every = layer_types.index("full_attention") + 1
    periodic = ["full_attention" if (i + 1) % every == 0 else layer_types[0]
                for i in range(len(layer_types))]
    return every if layer_types == periodic else None


def _config(folder: Path) -> dict[str, Any]:
    """config.json as a mapping ({} when it cannot be read: the registry refuses those)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}
