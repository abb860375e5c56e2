"""`specfleet bench`: a one-line sweep without YAML, llama-bench style.

`specfleet bench -m smollm2-135m -p edit_fn,story --arms plain,auto -r 3 -o md` builds the
matrix those flags describe, runs it on the fleet like `matrix run` (stored like any other
matrix, so `compare`, `history` and `report` read it), and prints its tables. `--arms
plain,auto,hf-lookup` adds a peer engine's own generation beside ours (`engine/peers.py`).
"""

from __future__ import annotations

import os
import re
import shlex
import unicodedata
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
    check_driver_settings,
    scheduler_options,
    split_list,
)
from specfleet.configs import packaged_names, prompts_dir
from specfleet.engine.kinds import ENGINES, MODEL_ENGINES
from specfleet.engine.peers import PEER_KINDS
from specfleet.errors import UserError
from specfleet.jobs.run import OWN_ARMS
from specfleet.settings import names_a_setting

BENCH_NAME = "bench"
DEFAULT_MAX_TOKENS = 128


def _is_file(item: str) -> bool:
    # A name with a slash is no packaged prompt: read it as a file, whose reader says what is
    # wrong (a missing file was "prompts[0].name: use letters, digits ...").
    # `notes.md` is a file too: a packaged prompt is named without its suffix.
    path = Path(item)
    # os.path's isfile: False, not an OSError, for a name too long to look up.
    if os.path.isfile(path) or "/" in item or os.sep in item or path.suffix in (".txt", ".md"):
        return True
    # Something of that name here (a folder, a FIFO, a link loop) and no packaged prompt: its
    # reader says what it is, not "no prompt file 'adir.txt' in the packaged prompts".
    return os.path.lexists(item) and item not in packaged_names(prompts_dir())


def _safe_name(text: str) -> str:
    """`my prompt` -> `my_prompt`, `ünï` -> `uni`, `.hidden` -> `hidden`: a valid prompt name."""
    decomposed = unicodedata.normalize("NFKD", text)  # `ü` -> `u` and a combining mark
    plain = "".join(c for c in decomposed if not unicodedata.combining(c))
    # A name starts with a letter or digit; a suffix may follow, so stay well under the limit.
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", plain).lstrip("_.-")[:100] or "prompt"


def _file_prompt_name(path: Path, taken: set[str]) -> str:
    """The file's stem as a prompt name; beside a namesake, its folder's name, else a count."""
    stem = _safe_name(path.stem)
    parent = _safe_name(path.resolve().parent.name)
    candidates = [stem, f"{parent}_{stem}"]
    candidates += (f"{stem}-{n}" for n in range(2, len(taken) + 3))
    return next(name for name in candidates if name not in taken)


def prompt_entries(items: list[str]) -> list[dict[str, Any]]:
    """Packaged prompts by name, prompt files by path; each file is named after its stem, made
    a valid name unique among the others (the same file twice keeps one name: a duplicate)."""
    from specfleet.jobs.spec_files import read_prompt_text

    taken = {item for item in items if not _is_file(item)}
    names: dict[Path, str] = {}
    entries: list[dict[str, Any]] = []
    for item in items:
        if not _is_file(item):
            entries.append({"name": item})
            continue
        path = Path(item)
        text = read_prompt_text(path, f"--prompt {item}")
        name = names.get(path.resolve()) or _file_prompt_name(path, taken)
        names[path.resolve()] = name
        taken.add(name)
        entries.append({"name": name, "text": text})
    return entries


def bench_spec_data(models: list[str], prompts: list[str], arms: list[str], repeats: int,
                    max_tokens: int, engines: list[str]) -> dict[str, Any]:
    """The matrix the flags describe, as a matrix file would hold it."""
    data: dict[str, Any] = {
        "name": BENCH_NAME, "models": models, "prompts": prompt_entries(prompts),
        "arms": arms, "repeats": repeats, "max_tokens": max_tokens,
        # No flag sets it: off, the parser passes a missing plain arm for bench to name --arms.
        "speedups": "plain" in arms,
    }
    if engines:
        data["targets"] = {"engines": engines}
    return data


# The matrix fields bench's flags fill, as the parser's messages name them.
FLAG_OF_FIELD = {"models": "--model", "prompts": "--prompt", "arms": "--arms",
                 "repeats": "--repeats", "max_tokens": "--max-tokens",
                 "targets.engines": "--engine"}
# The parser labels its lines `bench: `, the checks before a run `matrix 'bench': `.
_FIELD_AT = re.compile(rf"^(?:{BENCH_NAME}|matrix '{BENCH_NAME}'): "
                       rf"({'|'.join(map(re.escape, FLAG_OF_FIELD))})"
                       r"(?:\[(\d+)\])?(?:\.[\w.]+)?: ")
# What follows a field may begin with the engine it was met on (`torch: ...`).
_ENGINE_AT = re.compile(rf"(?:{'|'.join(map(re.escape, ENGINES))}): ")


def in_flag_terms(message: str, given: dict[str, list[str]]) -> str:
    """A matrix-field message in bench's terms: `bench: prompts[1].name: ...` ->
    `bench: --prompt -story: ...` (the item as given), `targets.engines` -> `--engine`.

    Args:
        message: the parser's one line, labelled `bench`.
        given: each flag's items as the user gave them (`{"--prompt": ["-story"]}`).
    """
    found = _FIELD_AT.match(message)
    if found is None:
        return message  # a file's own message (it names the path) or no field at all
    rest = message[found.end():]
    rest = rest[engine.end():] if (engine := _ENGINE_AT.match(rest)) else rest
    if names_a_setting(rest):
        return rest  # `SPECFLEET_MODELS PATH: ...` (a broken models.yaml) is no mistake of --model's
    flag = FLAG_OF_FIELD[found[1]]
    items = given.get(flag, [])
    index = int(found[2]) if found[2] is not None else None
    where = flag if index is None or index >= len(items) else f"{flag} {shlex.quote(items[index])}"
    rest = message[found.end():].replace("targets.engines", FLAG_OF_FIELD["targets.engines"])
    # No matrix file here: a --model folder counts from the current folder (`bench_spec`).
    rest = rest.replace("a folder counts from the matrix file's", "a folder counts from the current one")
    return f"{BENCH_NAME}: {where}: {rest}"


Many = list[str] | None


def arms_help() -> str:
    """Our arms, then each peer engine's own generation with the engine it runs on (the
    `jobs.run` and `engine.peers` registries)."""
    by_engines: dict[str, list[str]] = {}
    for peer, kind in PEER_KINDS.items():
        by_engines.setdefault(kind.runs_on, []).append(peer)
    peers = ", ".join(f"{', '.join(names)} ({engines})" for engines, names in by_engines.items())
    return f"Arms: {', '.join(OWN_ARMS)}, or a peer engine's own generation: {peers}"


# What an omitted --model, --prompt or --arms stands for (shown in -h).
DEFAULT_MODELS = ("smollm2-135m",)
DEFAULT_PROMPTS = ("edit_fn", "story")
DEFAULT_ARMS = ("plain", "auto")


def _many(flag: str, short: str | None, help_text: str,
          default: tuple[str, ...] = ()) -> typer.models.OptionInfo:
    names = (flag, short) if short else (flag,)
    # As click shows a default ("[default: 3]"); its own form for a text reads "(plain,auto)".
    shown = f"  [default: {','.join(default)}]" if default else ""
    return typer.Option(*names, help=f"{help_text}; comma-separated or repeated.{shown}")


def bench_command(
    model: Annotated[Many, _many(
        "--model", "-m", "Model aliases (specfleet models list) or folders",
        DEFAULT_MODELS)] = None,
    prompt: Annotated[Many, _many(
        "--prompt", "-p", "Packaged prompt names (story, edit_fn, ...) or files",
        DEFAULT_PROMPTS)] = None,
    arms: Annotated[Many, _many("--arms", "-a", arms_help(), DEFAULT_ARMS)] = None,
    repeats: Annotated[int, typer.Option(
        "--repeats", "-r", help="Repeats of every cell (5: the fewest whose verdicts hold "
        "whatever the two sides' spreads).")] = 5,
    max_tokens: Annotated[int, typer.Option(
        "--max-tokens", "-n", help="New-token limit of every reply.")] = DEFAULT_MAX_TOKENS,
    engine: Annotated[Many, _many(
        "--engine", "-e", f"Only these engines ({', '.join(MODEL_ENGINES)}; default: each engine "
        "the fleet runs a model on)")] = None,
    fmt: FormatOption = "table",
    rate: RateOption = "whole",
    address: AddressOption = None,
    embedded: EmbeddedOption = False,
    db: DbOption = None,
    require_quiet: RequireQuietOption = False,
    no_progress: NoProgressOption = False,
) -> None:
    """Run a sweep given on the command line (no YAML) and print its tables.

    Exit status 0 when every run is done, 1 when some failed or were interrupted (a host
    lost), 2 for a bad flag, 130 after Ctrl-C (the runs done so far stay stored: `matrix
    resume ID` runs the rest).
    """
    from specfleet.cli.matrix import run_spec

    spec, given = _sweep_spec({"--model": model, "--prompt": prompt, "--arms": arms,
                               "--engine": engine}, repeats, max_tokens)
    check_driver_settings()  # as `matrix run`: a malformed variable before the fleet
    try:
        outcome = run_spec(spec, address=address, embedded=embedded, db=db,
                           options=scheduler_options(no_progress, require_quiet), fmt=fmt,
                           rate=rate)
    except UserError as err:  # a model checked before the run: `--model X`, not `models[0]`
        said = in_flag_terms(str(err), given)
        if said == str(err):
            raise
        raise UserError(said) from None
    if outcome.status != "done":
        raise typer.Exit(1)


def _sweep_spec(flags: dict[str, Many], repeats: int,
                max_tokens: int) -> tuple[Any, dict[str, list[str]]]:
    """The matrix spec the flags describe, each mistake said in the flags' terms; with the
    flags' lists as read (defaults filled in) for the messages of the run after."""
    from specfleet.jobs.spec_files import parse_matrix_spec
    from specfleet.jobs.userinput import Problems, one_line_of

    # A model folder or prompt file whose name holds a comma is one item (it was split).
    given = {"--model": split_list("--model", flags["--model"] or list(DEFAULT_MODELS),
                                   os.path.exists),
             "--prompt": split_list("--prompt", flags["--prompt"] or list(DEFAULT_PROMPTS),
                                    os.path.exists),
             "--arms": split_list("--arms", flags["--arms"] or list(DEFAULT_ARMS)),
             "--engine": split_list("--engine", flags["--engine"])}
    data = bench_spec_data(given["--model"], given["--prompt"], given["--arms"], repeats,
                           max_tokens, given["--engine"])
    try:
        spec = parse_matrix_spec(data, BENCH_NAME, Path.cwd(), prompts_dir())
    except Problems as err:  # no file to validate: every mistake, each in flag terms
        lines = [in_flag_terms(line, given) for line in err.lines]
        raise UserError(one_line_of(BENCH_NAME, lines, most=len(lines))) from None
    except UserError as err:
        raise UserError(in_flag_terms(str(err), given)) from None
    if not spec.speedups:  # no flag turns speed-ups off, so bench needs plain
        raise UserError(f"{BENCH_NAME}: --arms: add plain: bench measures speed-ups over it "
                        f"(e.g. --arms plain,{','.join(given['--arms'])})")
    return spec, given


def register(app: typer.Typer) -> None:
    """Add the top-level `bench` command."""
    app.command("bench")(bench_command)
