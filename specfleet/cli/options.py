"""Options several commands share, declared once: the store (`--db`), the fleet
(`--address`, `--embedded`) and how a fleet run waits and shows progress, the model a
command names and the matrix id it reads (each refused when blank: `not_blank`), the local
model's engine and device, the calibration width, the `--prompt-lookup-*` settings
(`generate`, `job generate`), `--format` of every table-printing command and `--rate` of
those that print speed-ups.

Each is an `Annotated` type; a command gives the default (`db: DbOption = None`). Choices
and bounds are Typer's to check (a `Literal` type, `min=`/`max=`): a wrong value is one
`error:` line naming the flag and what it expects (`main.OneLineErrorsGroup`).
"""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from specfleet.engine.config import (
    DEFAULT_MAX_DRAFT,
    MAX_DRAFT_LIMIT,
    POLICY_NAMES,
    POLICY_OPTIONS,
    default_max_draft,
)
from specfleet.engine.kinds import (
    DEVICE_CHOICES,
    MODEL_ENGINES,
    DeviceChoice,
    ModelEngine,
    choices_text,
)
from specfleet.engine.stats import Rate
from specfleet.errors import UserError, one_line
from specfleet.report.grid import OUTPUT_FORMATS, check_format
from specfleet.settings import LEASE_S, STORE_RETRY_S
from specfleet.userfiles import check_writable_dir

# The store's times are UTC: said, as the web view heads them, lest they read as local.
UTC_MINUTE = "%Y-%m-%d %H:%M UTC"

# The store: `store.engine.resolve_url` reads None as $SPECFLEET_DB, else the default file.
DbOption = Annotated[str | None, typer.Option(
    "--db", help="Database URL (sqlite:///PATH, postgresql+psycopg://...) or SQLite file path; "
    "default $SPECFLEET_DB, else the user data dir.")]

# The fleet: `cluster.reach.choose_fleet` resolves None as the help says.
AddressOption = Annotated[str | None, typer.Option(
    "--address", help="Fleet head HOST:PORT; default $SPECFLEET_ADDRESS, $RAY_ADDRESS (auto: "
    "the cluster `ray start` started here, as in Ray), the fleet this machine joined (fleet "
    "up/join), else the embedded fleet.")]
EmbeddedOption = Annotated[bool, typer.Option(
    "--embedded", help="Use a private fleet of this machine only, whatever is joined or set.")]
RequireQuietOption = Annotated[bool, typer.Option(
    "--require-quiet", help="Wait for a quiet host before each timed run.")]
NoProgressOption = Annotated[bool, typer.Option(
    "--no-progress", help="No progress bars nor per-run lines (a wait is still said).")]


def not_blank(expected: str) -> Callable[[typer.CallbackParam, str | None], str | None]:
    """A Typer callback refusing a blank value in one line that names the flag or argument
    and what is expected, before a store is opened or a fleet reached for it (a store would
    say only "no matrix ''", a fleet "no model ''").

    Args:
        expected: what the value names (`a model alias`).

    Returns:
        The callback; it passes any other value (and None, not given) through.
    """
    def check(param: typer.CallbackParam, value: str | None) -> str | None:
        if value is not None and not value.strip():
            named = param.opts[0] if param.opts[0].startswith("-") else \
                param.metavar or (param.name or "").upper()
            raise UserError(f"{named}: expected {expected}, got a blank one")
        return value
    return check


MATRIX_ID = "a matrix id (`specfleet matrix list`)"

# `matrix list` and `job list`: SQLite's LIMIT takes 64 bits; no store holds a million.
LIST_LIMIT = 1_000_000
ListLimitOption = Annotated[int, typer.Option(
    "--limit", min=1, max=LIST_LIMIT, help="The newest N.")]


@contextlib.contextmanager
def writing_store(db: str | None, existing: bool = False) -> Iterator[Any]:
    """`open_store` for a command that stores runs: opening writes back what a driver kept in
    the journal during an outage, and this says so on stderr (`journal: 3 finished results
    written to the store ...`), whichever writing command opened it."""
    from specfleet.store.store import open_store

    with open_store(db, existing=existing) as store:
        if line := store.written_back.line():
            typer.echo(line, err=True)
        yield store


def echo_rows(rows: list[tuple[str, ...]], empty: str) -> None:
    """Rows of a listing (`matrix list`, `job list`), each column as wide as its widest
    value, no header (the first field is the id a script cuts); `empty` on stderr when there
    are none (on stdout, `job list | cut -d' ' -f1` read the id `no`)."""
    if not rows:
        typer.echo(empty, err=True)
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))] if rows else []
    for row in rows:
        typer.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def counts_text(counts: dict[str, int]) -> str:
    """Runs per status, `3 done, 1 interrupted` (`matrix status`, `job show`)."""
    order = ("done", "running", "pending", "failed", "interrupted")
    parts = [f"{counts[s]} {s}" for s in order if counts.get(s)]
    return ", ".join(parts) or "no runs"


# A model the fleet resolves (`job generate`, `job calibrate`), or its runs' model (`history`):
# an alias or a folder, as `generate -m` takes one (a fleet's host reads the folder's path).
ModelAliasOption = Annotated[str, typer.Option(
    "--model", callback=not_blank("a model alias"),
    help="Alias or model folder (a path as the target host sees it).")]

# A stored generation job a command reads (`job show`).
JobIdArgument = Annotated[str, typer.Argument(
    metavar="JOB_ID", callback=not_blank("a job id (`specfleet job list`)"),
    help="Job id (see `job list`).")]

# A stored matrix a command reads (`matrix show/status/resume`, `report`).
MatrixIdArgument = Annotated[str, typer.Argument(
    metavar="MATRIX_ID", callback=not_blank(MATRIX_ID), help="Matrix id (see `matrix list`).")]

# The model `generate` and `calibrate` load on this machine (`localmodel.load_model`).
LocalModelOption = Annotated[str, typer.Option(
    "--model", "-m", help="Alias or local model folder.")]
EngineOption = Annotated[ModelEngine, typer.Option(
    "--engine", help=f"{choices_text(MODEL_ENGINES)}.")]
DeviceOption = Annotated[DeviceChoice, typer.Option(
    "--device", help=f"{choices_text(DEVICE_CHOICES)}.")]

# A verify block is at most max-draft proposals plus the bonus row.
MAX_WIDTH_LIMIT = MAX_DRAFT_LIMIT + 1
MaxWidthOption = Annotated[int, typer.Option(
    "--max-width", min=1, max=MAX_WIDTH_LIMIT,
    help="Widest verify block measured (at least 2 for a table that is stored: the calibrated "
         "policy reads widths 1-2).")]

# Prompt-lookup settings; `lookup_given` gathers them by `LookupOptions` field name. Bounds
# are `PromptLookupConfig.validate`'s, whose errors name the flag (`LOOKUP_FLAG_PREFIX`).
LOOKUP_FLAG_PREFIX = "--prompt-lookup-"
_OWN_PREFIX = "own_"  # a policy option flag's parameter name: never one of a command's own


def max_draft_help() -> str:
    """`Default 7; 32 for calibrated.`: each policy's own default, from the registry."""
    own = [f"{default_max_draft(name)} for {name}" for name in POLICY_NAMES
           if default_max_draft(name) != DEFAULT_MAX_DRAFT]
    return "; ".join([f"Default {DEFAULT_MAX_DRAFT}", *own]) + "."


NgramMinOption = Annotated[int, typer.Option(
    "--prompt-lookup-ngram-min", help="Shortest suffix looked up.")]
NgramMaxOption = Annotated[int, typer.Option(
    "--prompt-lookup-ngram-max", help="Longest suffix looked up (tried first).")]
MaxDraftOption = Annotated[int | None, typer.Option(
    "--prompt-lookup-max-draft", help=max_draft_help())]
NoAdaptiveOption = Annotated[bool, typer.Option(
    "--prompt-lookup-no-adaptive", help="Always propose max-draft tokens.")]


def with_policy_option_flags(command: Callable[..., None]) -> Callable[..., None]:
    """Give `command` a `--prompt-lookup-NAME` flag per policy option (`POLICY_OPTIONS`),
    after its `max_draft` parameter; their values reach its `**own` (`lookup_given`)."""
    signature = inspect.signature(command, eval_str=True)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    flags = [
        inspect.Parameter(
            f"{_OWN_PREFIX}{option.name}", inspect.Parameter.POSITIONAL_OR_KEYWORD,
            default=None, annotation=Annotated[int | None, typer.Option(
                LOOKUP_FLAG_PREFIX + option.name.replace("_", "-"), help=option.help)],
        )
        for option in POLICY_OPTIONS.values()
    ]
    at = next(i for i, p in enumerate(params) if p.name == "max_draft") + 1
    command.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*params[:at], *flags, *params[at:]])
    return command


def split_list(flag: str, values: list[str] | None,
               keep_whole: Callable[[str], bool] = lambda value: False) -> list[str]:
    """`-p a,b -p c` -> [a, b, c]; an empty item is a one-line mistake naming the flag. A
    value `keep_whole` accepts is one item, commas and all (a file path that exists)."""
    items = [item.strip() for value in values or []
             for item in ([value] if keep_whole(value) else value.split(","))]
    if any(not item for item in items):
        raise UserError(f"{flag}: an empty name in {','.join(values or [])!r}; expected "
                        "comma-separated names")
    return items


def refuse_twice(flag: str, items: list[str], noun: str) -> None:
    """A comma list naming one value twice is a one-line mistake naming the flag and the
    value: it would run (or be tested) once, as if listed once."""
    twice = [item for i, item in enumerate(items) if item in items[:i]]
    if twice:
        named = ", ".join(dict.fromkeys(twice))
        raise UserError(f"{flag} lists {named} twice; expected each {noun} once")


def refuse_hosts_outside_embedded(hosts: list[str], label: str) -> None:
    """On the embedded fleet (this machine alone) `hosts` without this machine match
    nothing: one line before Ray starts (~20 s), not after. A real fleet's hosts are known
    only once it answers."""
    from specfleet.workers.hardware import default_host_name

    here = default_host_name()
    if hosts and here not in hosts:
        named = ", ".join(hosts)
        raise UserError(f"{label}: {named} {'is' if len(hosts) == 1 else 'are'} not in the "
                        f"embedded fleet, which is this machine alone ({here}); expected "
                        f"{here} or a fleet's --address")


def flag_given(ctx: typer.Context, name: str) -> bool:
    """Whether the parameter `name` was given, even at its default value."""
    source = ctx.get_parameter_source(name)
    # By name: Typer runs on a click of its own (`typer._click`), not the `click` package.
    return source is not None and source.name != "DEFAULT"


def lookup_given(ngram_min: int, ngram_max: int, max_draft: int | None,
                 own: Mapping[str, int | None], no_adaptive: bool = False) -> dict[str, Any]:
    """The prompt-lookup flags by `LookupOptions` field name (policy options by their own);
    `max_draft` only when given, so the policy's own default applies (`options_for`)."""
    given: dict[str, Any] = {"ngram_min": ngram_min, "ngram_max": ngram_max,
                             "adaptive": not no_adaptive}
    if max_draft is not None:
        given["max_draft"] = max_draft
    given.update({name.removeprefix(_OWN_PREFIX): value for name, value in own.items()
                  if value is not None})
    return given


def refuse_ngram_min_past_default(ngram_min: int, ngram_max: int, max_given: bool) -> None:
    """`--prompt-lookup-ngram-min` above ngram-max left at its default: the bound would name
    `--prompt-lookup-ngram-max`, a flag the user never typed, so this names the one given."""
    if ngram_min > ngram_max and not max_given:
        raise UserError(
            f"{LOOKUP_FLAG_PREFIX}ngram-min ({ngram_min}) must be <= ngram-max ({ngram_max}, "
            f"its default); expected {LOOKUP_FLAG_PREFIX}ngram-min {ngram_max} or less, or "
            f"{LOOKUP_FLAG_PREFIX}ngram-max beside it")


FORMAT_ALIASES = {"md": "markdown"}  # llama-bench's `-o md`


def _format(value: str) -> str:
    value = FORMAT_ALIASES.get(value, value)
    check_format(value)
    return value


FormatOption = Annotated[str, typer.Option(
    "--format", "-o", metavar="<" + "|".join(OUTPUT_FORMATS) + ">", callback=_format,
    help="table (terminal), markdown (or md), json or csv.")]


RateOption = Annotated[Rate, typer.Option(
    "--rate", help="The tok/s medians and speed-ups read: whole (the call, prefill included) "
    "or decode (after the first token); the other is printed beside.")]


WAIT_DEFAULT = "2m"  # = SchedulerOptions.host_wait_s (ray-free here; a test keeps them equal)


# A host that stays away longer than this is not coming back for this call: `resume` later.
MAX_WAIT_S = 7 * 24 * 3600


def parse_wait(text: str) -> float:
    """`--wait`: seconds, or a number with s, m or h (90s, 10m, 1h), at most a week."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text, flags=re.ASCII)
    if match is None:
        raise UserError(f"--wait {text!r}: expected a duration such as 90s, 10m or 1h")
    seconds = float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]
    if seconds > MAX_WAIT_S:
        raise UserError(one_line(f"--wait {text!r}: expected at most a week (168h); the runs "
                                 "of a host away longer stay pending for a later `resume`"))
    return seconds


def say_suspects(view, wait: str) -> None:
    """Say which hosts a matrix or job waits for, and how long at most."""
    if view.suspects:
        typer.echo(f"waiting up to {wait} for {', '.join(view.suspects)} (not in the fleet "
                   "now; their runs stay pending until they answer)", err=True)


# `--wait` of `matrix run`, `matrix resume` and `job resume`.
WaitOption = Annotated[str, typer.Option(
    "--wait", help="How long the runs of a host that went away (unreachable, suspect, not in "
    "the fleet) wait for it to come back (90s, 10m, 1h); then they stay pending for `resume`.")]


def scheduler_options(no_progress: bool, require_quiet: bool = False,
                      wait: str = WAIT_DEFAULT) -> Any:
    """The scheduler's options from the flags every driver shares (`matrix run` / `resume`,
    `bench`, `job generate` / `resume`, `parity run`)."""
    from specfleet.cluster.scheduler import SchedulerOptions  # imports ray: only when running

    return SchedulerOptions(progress=not no_progress, require_quiet=require_quiet,
                            host_wait_s=parse_wait(wait))


def check_driver_settings(report_dir: Path | None = None) -> None:
    """What a driver (`matrix run` / `resume`, `job generate` / `resume`, `parity run`) will
    need later, checked before the fleet starts: its environment (the run lease, the store
    retry) and a writable report folder."""
    LEASE_S.read()
    STORE_RETRY_S.read()
    if report_dir is not None:
        check_writable_dir(report_dir, "--report-dir")
