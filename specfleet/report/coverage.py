"""How much of what was asked a check actually compared: evidence or failure.

`parity` and `compare` pass only when every pair (or cell) they were asked about was
compared; a failed or missing arm, or two matrices with nothing in common, is a failed
check with the count printed ("3 of 4 pairs compared"), never a silent pass.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from specfleet.stats.runs import target_label
from specfleet.stats.view import PLAIN


@dataclass(frozen=True)
class Coverage:
    """`compared` of `planned` units (`pairs` or `cells`) had evidence on both sides."""

    compared: int
    planned: int
    unit: str

    @property
    def complete(self) -> bool:
        """True when something was planned and all of it was compared."""
        return self.planned > 0 and self.compared >= self.planned

    def text(self) -> str:
        return f"{self.compared} of {self.planned} {self.unit} compared"

    def counts(self) -> dict[str, int | bool]:
        """The JSON `coverage` object (`compare -o json`, the web API's `/api/compare`)."""
        return {"compared": self.compared, "planned": self.planned, "complete": self.complete}


def cell_keys(runs: Iterable) -> set[tuple[str, str, str, str]]:
    """(target, model, prompt, arm) of every run, whatever its status."""
    return {(target_label(r), r.model, r.prompt_name, r.arm) for r in runs}


def parity_coverage(all_runs: Iterable, compared: int) -> Coverage:
    """Arm-against-plain pairs planned in a matrix (every non-plain cell) vs compared."""
    planned = sum(1 for key in cell_keys(all_runs) if key[3] != PLAIN)
    return Coverage(compared, planned, "pairs")


def compare_coverage(runs_a: Iterable, runs_b: Iterable, compared: int) -> Coverage:
    """Cells planned in either matrix vs cells measured in both."""
    return Coverage(compared, len(cell_keys(runs_a) | cell_keys(runs_b)), "cells")
