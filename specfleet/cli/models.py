"""`specfleet models`: fetch a bundled model, list every alias and where it resolves."""

from __future__ import annotations

import os
from typing import Annotated, NoReturn

import typer

from specfleet.engine.runners.folders import weights_problem
from specfleet.errors import UserError
from specfleet.models.bundled import BUNDLED, bundled_dir, fetch_bundled, fetched
from specfleet.models.registry import (
    ResolvedModel,
    bundled_source,
    list_models,
    load_registry,
    local_path,
)
from specfleet.settings import HOME, MODELS
from specfleet.userfiles import check_writable_dir

app = typer.Typer(help="Model aliases: fetch a bundled model, list what resolves where.",
                  no_args_is_help=True)


@app.command("fetch")
def fetch_command(
    alias: Annotated[str, typer.Argument(
        metavar="ALIAS", help=f"An alias with a bundled source ({', '.join(BUNDLED)}, ...).")],
    force: Annotated[bool, typer.Option("--force", help="Download and convert again.")] = False,
) -> None:
    """Download and convert a bundled model into $SPECFLEET_HOME, else the user cache dir (once)."""
    registry = load_registry()
    if alias not in registry:
        raise UserError(f"models fetch: unknown alias {alias!r}; known: {', '.join(registry)}")
    sources = {v for k, v in registry[alias].items() if k != "description"}
    bundled = [bundled_source(source) for source in sources]
    if None in bundled:
        refuse_unbundled(alias, sources)
    for name in sorted({found[0].alias for found in bundled if found is not None}):
        target = bundled_dir(alias=name)
        if force or not fetched(name):  # a finished fetch writes nothing
            check_writable_dir(target.parent, HOME.name)
        typer.echo(fetch_bundled(name, force=force).message)


def refuse_unbundled(alias: str, sources: set[str]) -> NoReturn:
    """One line for an alias with a source `models fetch` cannot fill: its Hugging Face repos
    to download, or the local folders it names (read where they are: nothing to fetch)."""
    repos = sorted(v.removeprefix("hf:") for v in sources if v.startswith("hf:"))
    if not repos:  # a folder is read in place: pointing the alias at one is no answer
        folders = sorted(str(local_path(v)) for v in sources if bundled_source(v) is None)
        named, where = ("a local folder", "it is") if len(folders) == 1 else \
            ("local folders", "they are")
        raise UserError(f"models fetch: {alias!r} names {named} ({', '.join(folders)}), which "
                        f"specfleet reads where {where} and never fetches; expected a bundled "
                        f"alias ({', '.join(BUNDLED)})")
    download = "; ".join(f"hf download {repo}" for repo in repos)
    raise UserError(
        f"models fetch: {alias!r} is not bundled; specfleet never downloads it: fill the "
        f"local Hugging Face cache ({download}) or point the alias at a folder in a "
        f"models.yaml named by {MODELS.name}"
    )


@app.command("list")
def list_command() -> None:
    """Every alias x engine: resolved path, fetched or not (a folder without weights is not,
    and says so), size."""
    rows = [("ALIAS", "ENGINE", "FETCHED", "SIZE", "PATH")]
    for model in list_models():
        missing = missing_files(model)
        ready = model.fetched and missing is None
        size = f"{model.size_bytes / 1e6:.0f} MB" if ready else "-"
        path = str(model.path) if model.path is not None else f"({model.source}, not cached)"
        rows.append((model.alias, model.engine, "yes" if ready else "no", size,
                     path + (f" ({missing})" if missing else "")))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True)]
        typer.echo("  ".join([*cells, row[4]]))


def missing_files(model: ResolvedModel) -> str | None:
    """What a model folder of `models list` lacks, said beside its path: the weights (with
    config.json alone every run of it is refused), else, for a local folder source,
    config.json or the folder itself; None when nothing is, or `models fetch` or the HF
    cache would fill it."""
    folder = model.path
    if model.fetched and folder is not None:
        return weights_problem(folder)
    if folder is None or bundled_source(model.source) is not None or \
            model.source.startswith("hf:"):
        return None
    if folder.is_dir():
        return "no config.json there"
    return "not a folder" if os.path.lexists(folder) else "no such folder"  # /dev/null, a FIFO
