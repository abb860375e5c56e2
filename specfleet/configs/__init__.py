"""The configuration that ships inside the package: model aliases, prompts, matrices and
width-cost tables.

Read with `importlib.resources`, so an installed wheel finds its own demo. A bare name
(`demo`, `story`) given where a file is expected resolves to the packaged file of that name;
anything that looks like a path stays a path.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

PROMPT_SUFFIXES = (".txt", ".md")


def _root() -> Path:
    # pip installs wheels unzipped, so the package data are plain files on disk.
    return Path(str(files(__name__)))


def models_file() -> Path:
    """The packaged model alias table (`models.yaml`)."""
    return _root() / "models.yaml"


def prompts_dir() -> Path:
    """The folder of packaged prompts (`<name>.txt`)."""
    return _root() / "prompts"


def matrices_dir() -> Path:
    """The folder of packaged matrices (`<name>.yaml`)."""
    return _root() / "matrices"


def costs_dir() -> Path:
    """The folder of packaged width-cost tables (`<name>.yaml`, spec 7.6)."""
    return _root() / "costs"


def packaged_names(folder: Path) -> list[str]:
    """The bare names of the files in a packaged folder, sorted."""
    return sorted(p.stem for p in folder.iterdir() if p.is_file() and not p.name.startswith("_"))


def is_bare_name(text: str) -> bool:
    """A name without a folder or suffix: `demo`, not `demo.yaml` nor `./demo`."""
    return bool(text) and "/" not in text and "\\" not in text and "." not in text


def matrix_path(text: str | Path) -> Path:
    """The matrix file meant by `text`: an existing path, else the packaged `<text>.yaml`.

    Args:
        text: a path, or a bare name such as `demo` (see `packaged_names(matrices_dir())`).

    Returns:
        The path to read; a missing one is returned unchanged (the loader names it).
    """
    path = Path(text)
    # lexists: a link here named `demo` that leads nowhere is the user's, not the packaged
    # demo; False for a name too long.
    if os.path.lexists(path) or not is_bare_name(str(text)):
        return path
    packaged = matrices_dir() / f"{text}.yaml"
    return packaged if os.path.isfile(packaged) else path


def prompt_path(text: str | Path) -> Path:
    """The prompt file meant by `text`: an existing path, else the packaged `<text>.txt`."""
    path = Path(text)
    # lexists: a link here named `story` that leads nowhere is the user's, not the packaged
    # story; False for a name too long.
    if os.path.lexists(path) or not is_bare_name(str(text)):
        return path
    for suffix in PROMPT_SUFFIXES:
        packaged = prompts_dir() / f"{text}{suffix}"
        if os.path.isfile(packaged):  # False for a name too long, where is_file raises
            return packaged
    return path
