"""A titled table of strings, rendered with rich (terminal), as markdown, or as CSV."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Literal, get_args

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Every table-printing command's `--format`, one set: rich (terminal), markdown, JSON, CSV.
OutputFormat = Literal["table", "markdown", "json", "csv"]
OUTPUT_FORMATS: tuple[str, ...] = get_args(OutputFormat)


def check_format(fmt: str, formats: tuple[str, ...] = OUTPUT_FORMATS) -> None:
    """One `UserError` line when `fmt` is not one of `formats`."""
    if fmt not in formats:
        from specfleet.errors import UserError

        raise UserError(f"--format: unknown format {fmt!r}; expected one of {', '.join(formats)}")


# Wide enough that rich never wraps a matrix table; tables keep their natural width.
CONSOLE_WIDTH = 400


@dataclass(frozen=True)
class Grid:
    """Headers and rows of text; `notes` are lines printed under the table."""

    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    notes: tuple[str, ...] = ()
    left_cols: int = 2  # leading label columns, left-aligned; the rest align right


def to_rich(grids: list[Grid], heading: str = "") -> str:
    """The grids as rich prints them as plain text (no colour codes), one after the other,
    laid out here in one pass: rich measures and renders every cell as an object (30 s for a
    table of 12,000 runs). Text rich would change (a control character, a line past its
    console width) goes to rich itself."""
    texts = (heading, *(text for grid in grids for text in (grid.title, *grid.notes)))
    if not all(_one_line(text) for text in texts):
        return _rich_text(grids, heading)
    lines = [heading] if heading else []
    for grid in grids:
        table = _table_lines(grid)
        if table is None:
            return _rich_text(grids, heading)
        lines += [grid.title, *table, *grid.notes, ""]
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def _one_line(text: str) -> bool:
    return text.isprintable() and cell_len(text) <= CONSOLE_WIDTH


def _table_lines(grid: Grid) -> list[str] | None:
    """rich's `box.SIMPLE_HEAD` table of `grid` (a blank edge above and below, the headers,
    a rule), or None where rich would not print the cells as they are."""
    widths = [cell_len(header) for header in grid.headers]
    for row in grid.rows:
        for i, cell in enumerate(row):
            if not cell.isprintable():
                return None
            widths[i] = max(widths[i], cell_len(cell))
    if not all(header.isprintable() for header in grid.headers) or \
            sum(widths) + 3 * len(widths) + 1 > CONSOLE_WIDTH:  # rich would shrink columns
        return None
    left = [i < grid.left_cols for i in range(len(widths))]

    def line(cells: tuple[str, ...]) -> str:
        return "  " + "   ".join(_aligned(cell, width, on_left)
                                  for cell, width, on_left in zip(cells, widths, left, strict=True))

    rule = " " + "─" * (sum(widths) + 3 * len(widths) - 1)
    return ["", line(grid.headers), rule, *(line(row) for row in grid.rows), ""]


def _aligned(cell: str, width: int, on_left: bool) -> str:
    if on_left:
        return cell + " " * (width - cell_len(cell))
    cell = cell.rstrip()  # as rich's right justification does
    return " " * (width - cell_len(cell)) + cell


def _rich_text(grids: list[Grid], heading: str = "") -> str:
    """The grids rendered by rich as plain text (no colour codes), one after the other."""
    out = io.StringIO()
    console = Console(file=out, width=CONSOLE_WIDTH, color_system=None, highlight=False)
    if heading:
        console.print(Text(heading))
    for grid in grids:
        # the title on its own line: a table title would wrap at the table's width
        console.print(Text(grid.title))
        table = Table(box=box.SIMPLE_HEAD)
        for i, header in enumerate(grid.headers):
            table.add_column(Text(header), no_wrap=True, justify="left" if i < grid.left_cols else "right")
        for row in grid.rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
        for note in grid.notes:
            console.print(Text(note), soft_wrap=True)
        console.print()
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines()).rstrip() + "\n"


def md_text(text: str) -> str:
    """Stored text (a name, a prompt) as markdown shows it: a `<` escaped, or `Vec<u8>` and
    `List<int>` in a code prompt render as HTML tags and vanish (`<script>` would run in a
    viewer that trusts the file)."""
    return text.replace("<", "\\<")


def md_cell(text: str) -> str:
    """Stored text as one markdown table cell: `md_text`, its pipes and line breaks escaped
    (a line break would end the row: a model folder's path may hold one)."""
    return md_text(text).replace("|", "\\|").replace("\r\n", "<br>").replace(
        "\n", "<br>").replace("\r", "<br>")


def to_markdown(grids: list[Grid], heading: str = "", level: int = 3) -> str:
    """Render grids as GitHub markdown tables, each under a heading of `level` (`heading`
    as given: its own text through `md_text` where it holds stored names)."""
    lines = [heading, ""] if heading else []
    for grid in grids:
        lines += [f"{'#' * level} {md_text(grid.title)}", ""]
        lines.append("| " + " | ".join(md_cell(h) for h in grid.headers) + " |")
        lines.append("|" + "---|" * len(grid.headers))
        lines += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in grid.rows]
        if grid.notes:
            lines.append("")
            lines += [md_text(note) for note in grid.notes]
        lines.append("")
    return "\n".join(lines)


def to_csv(headers: list[str], rows: list[list[object]]) -> str:
    """Plain CSV text with a header line."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows(["" if v is None else v for v in row] for row in rows)
    return out.getvalue()
