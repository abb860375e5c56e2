"""Options several commands share, declared once: the store (`--db`), the fleet
(`--address`, `--embedded`) and how a fleet run waits and shows progress, the model a
command names, the local model's engine and device, the calibration width, `--format` of
every table-printing command and `--rate` of those that print speed-ups.

Each is an `Annotated` type; a command gives the default (`db: DbOption = None`). Choices
and bounds are Typer's to check (a `Literal` type, `min=`/`max=`): a wrong value is one
`error:` line naming the flag and what it expects (`main.OneLineErrorsGroup`).
"""

from __future__ import annotations

from typing import Annotated

import typer

from specfleet.engine.config import MAX_DRAFT_LIMIT
from specfleet.engine.kinds import (
    DEVICE_CHOICES,
    MODEL_ENGINES,
    DeviceChoice,
    ModelEngine,
    choices_text,
)
from specfleet.report.grid import OUTPUT_FORMATS, check_format
from specfleet.stats.runs import Rate

# The store: `store.engine.resolve_url` reads None as $SPECFLEET_DB, else the default file.
DbOption = Annotated[str | None, typer.Option(
    "--db", help="Database URL (sqlite:///PATH, postgresql+psycopg://...) or SQLite file path; "
    "default $SPECFLEET_DB, else the user data dir.")]

# The fleet: `cluster.reach.choose_fleet` resolves None as the help says.
AddressOption = Annotated[str | None, typer.Option(
    "--address", help="Fleet head HOST:PORT; default $SPECFLEET_ADDRESS, $RAY_ADDRESS, the "
    "fleet this machine joined (fleet up/join), else the embedded fleet.")]
EmbeddedOption = Annotated[bool, typer.Option(
    "--embedded", help="Use a private fleet of this machine only, whatever is joined or set.")]
RequireQuietOption = Annotated[bool, typer.Option(
    "--require-quiet", help="Wait for a quiet host before each timed run.")]
NoProgressOption = Annotated[bool, typer.Option("--no-progress", help="No progress bars.")]

# A model the fleet resolves by alias (`job generate`, `job calibrate`, `history`).
ModelAliasOption = Annotated[str, typer.Option("--model", help="Model alias.")]

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
    "--max-width", min=1, max=MAX_WIDTH_LIMIT, help="Widest verify block measured.")]

FORMAT_ALIASES = {"md": "markdown"}  # llama-bench's `-o md`


def _format(value: str) -> str:
    value = FORMAT_ALIASES.get(value, value)
    check_format(value)
    return value


FormatOption = Annotated[str, typer.Option(
    "--format", "-o", metavar="[" + "|".join(OUTPUT_FORMATS) + "]", callback=_format,
    help="table (terminal), markdown (or md), json or csv.")]


RateOption = Annotated[Rate, typer.Option(
    "--rate", help="The tok/s medians and speed-ups read: whole (the call, prefill included) "
    "or decode (after the first token); the other is printed beside.")]
