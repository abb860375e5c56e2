"""A copy of a model folder with some of it changed, the rest linked to the original."""

from __future__ import annotations

import json
from pathlib import Path


def edited_folder(source: Path, folder: Path, edit: dict) -> Path:
    """`source` linked file by file into `folder`, with `edit`'s config fields changed in
    config.json and its file names (a key with a dot) written with their text."""
    folder.mkdir()
    for item in source.iterdir():
        if item.is_file() and item.name not in ("config.json", *edit):
            (folder / item.name).symlink_to(item)
    config = json.loads((source / "config.json").read_text())
    config.update({key: value for key, value in edit.items() if "." not in key})
    (folder / "config.json").write_text(json.dumps(config))
    for name, text in edit.items():
        if "." in name:
            (folder / name).write_text(text)
    return folder
