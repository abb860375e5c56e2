"""The grid renderers: markdown cells that keep their table's columns."""

from __future__ import annotations

from specfleet.report.grid import Grid, to_markdown


def test_a_pipe_or_line_break_in_a_markdown_cell_keeps_the_row_one_line():
    grid = Grid("t", ("model", "n"), (("/m/a|b\nc\r\nd", "1"),), left_cols=1)
    rows = [line for line in to_markdown([grid]).splitlines() if line.startswith("|")]
    assert rows[-1] == "| /m/a\\|b<br>c<br>d | 1 |" and len(rows) == 3
