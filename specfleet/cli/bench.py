"""`specfleet bench`: a one-line sweep without YAML, llama-bench style.

`specfleet bench -m smollm2-135m -p edit_fn,story --arms plain,auto -r 3 -o md` builds the
matrix those flags describe, runs it on the fleet like `matrix run` (stored like any other
matrix, so `compare`, `history` and `report` read it), and prints its tables. `--arms
plain,auto,hf-lookup` adds a peer engine's own generation beside ours (`engine/peers.py`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from specfleet.cli.options import (
    AddressOption,
    DbOption,
    EmbeddedOption,
    FormatOption,
    NoProgressOption,
    RateOption,
    RequireQuietOption,
)
from specfleet.engine.kinds import MODEL_ENGINES
from specfleet.engine.peers import PEER_KINDS
from specfleet.errors import UserError
from specfleet.jobs.run import OWN_ARMS

BENCH_NAME = "bench"
DEFAULT_MAX_TOKENS = 128


def split_list(flag: str, values: list[str] | None) -> list[str]:
    """`-p a,b -p c` -> [a, b, c]; an empty item is a one-line mistake naming the flag."""
    items = [item.strip() for value in values or [] for item in value.split(",")]
    if any(not item for item in items):
        raise UserError(f"{flag}: an empty name in {','.join(values or [])!r}; expected "
                        "comma-separated names")
    return items


def prompt_entry(name: str) -> dict[str, Any]:
    """A packaged prompt by name, or a prompt file by path (named after its stem)."""
    path = Path(name)
    # A name with a slash is no packaged prompt: read it as a file, whose reader says what is
    # wrong (a missing file was "prompts[0].name: use letters, digits ...").
    if path.is_file() or "/" in name or os.sep in name:
        from specfleet.jobs.spec_files import read_prompt_text

        return {"name": path.stem, "text": read_prompt_text(path)}
    return {"name": name}


def bench_spec_data(models: list[str], prompts: list[str], arms: list[str], repeats: int,
                    max_tokens: int, engines: list[str]) -> dict[str, Any]:
    """The matrix the flags describe, as a matrix file would hold it."""
    data: dict[str, Any] = {
        "name": BENCH_NAME, "models": models, "prompts": [prompt_entry(p) for p in prompts],
        "arms": arms, "repeats": repeats, "max_tokens": max_tokens,
    }
    if engines:
        data["targets"] = {"engines": engines}
    return data


Many = list[str] | None


def arms_help() -> str:
    """Our arms, then each peer engine's own generation with the engine it runs on (the
    `jobs.run` and `engine.peers` registries)."""
    by_engines: dict[str, list[str]] = {}
    for peer, kind in PEER_KINDS.items():
        by_engines.setdefault(kind.runs_on, []).append(peer)
    peers = ", ".join(f"{', '.join(names)} ({engines})" for engines, names in by_engines.items())
    return f"Arms: {', '.join(OWN_ARMS)}, or a peer engine's own generation: {peers}"


def _many(flag: str, short: str | None, help_text: str) -> typer.models.OptionInfo:
    names = (flag, short) if short else (flag,)
    return typer.Option(*names, help=f"{help_text}; comma-separated or repeated.")


def bench_command(
    model: Annotated[Many, _many(
        "--model", "-m", "Model aliases (specfleet models list) or folders")] = None,
    prompt: Annotated[Many, _many(
        "--prompt", "-p", "Packaged prompt names (story, edit_fn, ...) or files")] = None,
    arms: Annotated[Many, _many("--arms", "-a", arms_help())] = None,
    repeats: Annotated[int, typer.Option("--repeats", "-r", help="Repeats of every cell.")] = 3,
    max_tokens: Annotated[int, typer.Option(
        "--max-tokens", "-n", help="New-token limit of every reply.")] = DEFAULT_MAX_TOKENS,
    engine: Annotated[Many, _many(
        "--engine", "-e", f"Only these engines ({', '.join(MODEL_ENGINES)})")] = None,
    fmt: FormatOption = "table",
    rate: RateOption = "whole",
    address: AddressOption = None,
    embedded: EmbeddedOption = False,
    db: DbOption = None,
    require_quiet: RequireQuietOption = False,
    no_progress: NoProgressOption = False,
) -> None:
    """Run a sweep given on the command line (no YAML) and print its tables.

    Exit status 0 when every run is done, 1 when some failed or were interrupted.
    """
    from specfleet.cli.matrix import run_spec, scheduler_options
    from specfleet.configs import prompts_dir
    from specfleet.jobs.spec_files import parse_matrix_spec

    data = bench_spec_data(
        split_list("--model", model or ["smollm2-135m"]),
        split_list("--prompt", prompt or ["edit_fn", "story"]),
        split_list("--arms", arms or ["plain", "auto"]), repeats, max_tokens,
        split_list("--engine", engine))
    spec = parse_matrix_spec(data, "bench", Path.cwd(), prompts_dir())
    outcome = run_spec(spec, address=address, embedded=embedded, db=db,
                       options=scheduler_options(no_progress, require_quiet), fmt=fmt,
                       rate=rate)
    if outcome.status != "done":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the top-level `bench` command."""
    app.command("bench")(bench_command)
