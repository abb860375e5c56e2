"""What a model folder needs before an engine can load it: the weights, a tokenizer and a
`model_type` the engine's library knows, checked without loading anything. `matrix
validate` and `matrix run` ask this before a fleet starts, so a folder no run could load is
one line rather than a stored matrix of failed runs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from specfleet.engine.kinds import MODEL_ENGINES
from specfleet.userfiles import json_object

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
    if not _holds(folder, WEIGHT_PATTERNS):
        return (f"{folder} holds no weights; expected the model's *.safetensors beside its "
                "config.json")
    if not _holds(folder, TOKENIZER_PATTERNS):
        return (f"{folder} holds no tokenizer; expected tokenizer.json (or tokenizer.model) "
                "beside its config.json")
    model_type = _model_type(folder)
    if model_type is not None and not knows_model_type(engine, model_type):
        return (f"{folder}: model_type {model_type!r} is an architecture the {engine} engine "
                f"does not know; expected one its library ({_LIBRARY[engine]}) implements")
    return json_files_problem(folder)


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


def knows_model_type(engine: str, model_type: str) -> bool:
    """Whether the library behind `engine` has an implementation of `model_type` (True where
    the library is not installed: the missing engine is said on its own)."""
    if importlib.util.find_spec(_MODULE[engine]) is None:
        return True
    if engine == "torch":
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

        return model_type in CONFIG_MAPPING_NAMES
    from mlx_lm.utils import MODEL_REMAPPING  # as mlx-lm's loader names a model's module

    module = MODEL_REMAPPING.get(model_type, model_type)
    if not module.isidentifier():  # mlx-lm imports `mlx_lm.models.<model_type>`
        return False
    return importlib.util.find_spec(f"mlx_lm.models.{module}") is not None


def _holds(folder: Path, patterns: tuple[str, ...]) -> bool:
    return any(next(folder.glob(pattern), None) is not None for pattern in patterns)


def _model_type(folder: Path) -> str | None:
    """config.json's model_type when it is text (the registry refuses the other shapes)."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    model_type = config.get("model_type") if isinstance(config, dict) else None
    return model_type if isinstance(model_type, str) else None
