"""Options several commands share, declared once: `--format` of every table-printing
command, and `--rate` of those that print speed-ups."""

from __future__ import annotations

from typing import Annotated

import typer

from specfleet.report.grid import OUTPUT_FORMATS, check_format
from specfleet.stats.runs import Rate

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
