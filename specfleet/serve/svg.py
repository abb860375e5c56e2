"""Geometry and colours of the two plots the web view draws server-side (no JavaScript, no
CDN): the speed-up heatmap of a matrix and the history plot of a cell. The templates turn
these frozen shapes into inline SVG; every text in them is escaped by Jinja there."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specfleet.jobs.resolve import counted
from specfleet.report.history import (
    HistoryRow,
    change_text,
    history_speedup_text,
    settings_changed,
)
from specfleet.report.plots import WITHIN_NOISE_FILL, neutral_fill
from specfleet.report.tables import interval_text, speedup_text
from specfleet.stats.view import PLAIN, CellView, MatrixView

CELL_W, CELL_H, LABEL_W, HEAD_H = 190, 34, 230, 28
COLUMN_CHARS = 40  # a longer prompt name heads its column cut, whole on hover
PLOT_W, PLOT_H, PAD_L, PAD_R, PAD_T, PAD_B = 760, 240, 64, 16, 16, 54


@dataclass(frozen=True)
class HeatCell:
    x: int
    y: int
    text: str  # exactly the terminal table's cell text
    fill: str
    title: str
    href: str | None
    key: str  # target|model|prompt|arm (for tests and tooltips)
    speedup: float | None
    loop: bool


@dataclass(frozen=True)
class Heatmap:
    target: str
    cell_w: int
    width: int
    height: int
    columns: tuple[tuple[int, str, str], ...]  # (x, prompt as shown, prompt)
    rows: tuple[tuple[int, str], ...]  # (y, "model · arm")
    cells: tuple[HeatCell, ...]


def speedup_fill(cell: CellView) -> str:
    """Grey within noise (and for plain), blue-grey without a verdict (under 3 repeats),
    green for a gain, red for a loss; the further from 1.0x, the stronger (saturating at
    2x / 0.5x)."""
    if cell.arm == PLAIN or cell.speedup is None:
        return WITHIN_NOISE_FILL
    if (neutral := neutral_fill(cell)) is not None:  # the record's PNG greys the same cells
        return neutral
    strength = min(1.0, abs(cell.speedup - 1.0) / (1.0 if cell.speedup > 1 else 0.5))
    light = int(92 - 42 * strength)
    hue = 130 if cell.verdict == "gain" else 4
    return f"hsl({hue}, 55%, {light}%)"


def _cell_title(cell: CellView) -> str:
    rates = ", ".join(f"{r:.2f}" for r in cell.rates)
    parts = [f"{cell.model} / {cell.prompt} / {cell.arm} on {cell.target}",
             f"median {cell.median_tok_per_s:.2f} tok/s over {cell.n} [{rates}]"]
    low, high, coverage = cell.speedup_low, cell.speedup_high, cell.speedup_coverage
    if low is not None and high is not None and coverage is not None:
        parts.append(f"{cell.verdict}: speed-up {interval_text(low, high, coverage)}")
    if cell.noisy_runs:
        parts.append(counted(cell.noisy_runs, "noisy run"))
    return "; ".join(parts)


def heatmap(view: MatrixView, target: str, href) -> Heatmap:
    """The speed-up table of one target as a grid of coloured cells (rows model x arm,
    columns prompts), each cell's text and markers as `matrix show` prints them.

    Args:
        href: (CellView) -> the link of the cell's history page.
    """
    texts = [speedup_text(c) for c in view.cells if c.target == target and c.rates]
    # Wide enough for the longest cell text (12.5 px monospace is ~7.6 px a character).
    cell_w = max(CELL_W, 8 * max((len(t) for t in texts), default=0) + 16)
    # ... and for its prompt's name, up to COLUMN_CHARS: a longer one ran over its
    # neighbours' and past the heatmap's right edge.
    longest_prompt = max((len(p) for p in view.prompts), default=0)
    cell_w = max(cell_w, 8 * min(longest_prompt, COLUMN_CHARS) + 16)
    rows_found = [(model, arm, [view.cell(target, model, p, arm) for p in view.prompts])
                  for model in view.models for arm in view.arms]
    shown = [row for row in rows_found if any(c is not None for c in row[2])]
    # Wide enough for the longest "model · arm" label too (a peer's name can be long).
    label_w = max(LABEL_W, 8 * max((len(f"{m} · {a}") for m, a, _ in shown), default=0) + 16)
    rows: list[tuple[int, str]] = []
    cells: list[HeatCell] = []
    for model, arm, found in shown:
        y = HEAD_H + len(rows) * CELL_H
        rows.append((y, f"{model} · {arm}"))
        for i, cell in enumerate(found):
            if cell is None or not cell.rates:
                continue
            cells.append(HeatCell(
                x=label_w + i * cell_w, y=y, text=speedup_text(cell),
                fill=speedup_fill(cell), title=_cell_title(cell), href=href(cell),
                key="|".join((cell.target, cell.model, cell.prompt, cell.arm)),
                speedup=cell.speedup, loop=cell.loop,
            ))
    fits = (cell_w - 16) // 8
    columns = tuple((label_w + i * cell_w, p if len(p) <= fits else p[:fits - 1] + "…", p)
                    for i, p in enumerate(view.prompts))
    return Heatmap(target, cell_w, label_w + cell_w * len(view.prompts) + 2,
                   HEAD_H + CELL_H * len(rows) + 2, columns, tuple(rows), tuple(cells))


@dataclass(frozen=True)
class PlotPoint:
    x: float
    y: float
    y_low: float
    y_high: float
    changed: bool
    label: str  # the matrix id under the axis
    title: str  # hover text: values, change test, provenance differences
    matrix_id: str


@dataclass(frozen=True)
class PlotBreak:
    """Where the settings change between two points: the line stops, a dotted rule says why."""

    x: float  # halfway between the two points
    title: str  # hover text: the settings that differ


@dataclass(frozen=True)
class Plot:
    title: str
    unit: str
    width: int
    height: int
    ticks: tuple[tuple[float, str], ...]  # (y, label)
    points: tuple[PlotPoint, ...]
    lines: tuple[str, ...]  # SVG polyline points, one line per run of points with one setting
    breaks: tuple[PlotBreak, ...] = ()
    parity_y: float | None = None  # where 1x is, on a speed-up plot: the line to beat

    @property
    def label_room(self) -> tuple[int, int]:
        """(px left of the frame, px below it) the longest matrix id under the axis needs:
        rotated 30 degrees up from its point, an id of L px (11 px text, under 6.5 px a
        character) reaches L/2 below its baseline, 34 px above the foot, and 0.87 L left of
        its point. An id longer than a demo's ran off the frame."""
        label_px = max(len(p.label) for p in self.points) * 6.5
        below = max(0, math.ceil(label_px / 2 - 30))
        left = max(0, math.ceil(label_px * 0.87 - self.points[0].x + 4))
        return left, below


def _scale(lo: float, hi: float, unit: str = ""):
    """`y_of` for values in lo..hi (padded), and round ticks across them labelled in `unit`."""
    if hi <= lo:
        lo, hi = lo * 0.9 - 1e-9, hi * 1.1 + 1e-9
    pad = (hi - lo) * 0.08
    lo, hi = max(0.0, lo - pad), hi + pad
    inner = PLOT_H - PAD_T - PAD_B

    def y_of(v: float) -> float:
        return round(PAD_T + inner * (1 - (v - lo) / (hi - lo)), 1)

    return y_of, tuple((y_of(v), f"{v:.{decimals}f}{unit}")
                       for v, decimals in _round_ticks(lo, hi))


def _round_ticks(lo: float, hi: float, most: int = 8) -> list[tuple[float, int]]:
    """Values 1, 2 or 5 x 10^k apart inside lo..hi (at most `most` of them), each with the
    decimals its step needs: 12, 14, 16 or 0.95, 1.00, 1.05, not 13.06 and 15.46."""
    raw = (hi - lo) / (most - 1)
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw * (1 - 1e-9))
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    first = math.ceil(lo / step - 1e-9)
    return [(round(k * step, 10), decimals)
            for k in range(first, math.floor(hi / step + 1e-9) + 1)]


def _point_title(row: HistoryRow) -> str:
    values = ", ".join(f"{v:.2f}" for v in row.values)
    speedup = ("" if row.speedup is None else
               f"; speed-up {history_speedup_text(row.speedup)}")
    differs = f"; differs from previous in {', '.join(row.differs)}" if row.differs else ""
    return (f"{row.matrix_id} ({row.submitted_at} UTC): median {row.median_tok_per_s:.2f} "
            f"tok/s [{values}]{speedup}; change vs previous: {change_text(row.change)}{differs}")


def history_plot(rows: list[HistoryRow], speedup: bool = False,
                 series: str | None = None) -> Plot | None:
    """One series' history (a target and a token limit) as a line with min-max bars per
    matrix, changes marked.

    Args:
        rows: `cell_history` rows of ONE series, in time order.
        speedup: plot the speed-up over plain (no bars) instead of tok/s.
        series: what the caption names it by (default: the rows' target).

    Returns:
        The plot, or None when there is nothing to draw (no speed-ups).
    """
    kept = [i for i, r in enumerate(rows) if not speedup or r.speedup is not None]
    changed = _settings_since(rows, kept)
    rows = [rows[i] for i in kept]
    if not rows:
        return None
    if speedup:
        # Every row left has a speed-up; the filter only narrows the type.
        lows = highs = [r.speedup for r in rows if r.speedup is not None]
        # 1x is in range and drawn: 1.00 -> 1.11x no longer fills the plot's height
        y_of, ticks = _scale(min(*lows, 1.0), max(*highs, 1.0), "x")
    else:
        lows, highs = [min(r.values) for r in rows], [max(r.values) for r in rows]
        y_of, ticks = _scale(min(lows), max(highs))
    inner_w = PLOT_W - PAD_L - PAD_R
    step = inner_w / max(1, len(rows) - 1)
    points = []
    for i, row in enumerate(rows):
        x = round(PAD_L + (step * i if len(rows) > 1 else inner_w / 2), 1)
        mid = row.speedup if speedup else row.median_tok_per_s
        points.append(PlotPoint(
            x=x, y=y_of(mid), y_low=y_of(lows[i]), y_high=y_of(highs[i]),
            # The change test is on tok/s: marked on that plot only.
            changed=not speedup and bool(row.change and row.change.changed), label=row.matrix_id,
            title=_point_title(row), matrix_id=row.matrix_id,
        ))
    what = "speed-up over plain" if speedup else "tok/s (median, min-max bars)"
    return Plot(f"{series or rows[0].target}: {what}", "x" if speedup else "tok/s", PLOT_W, PLOT_H,
                ticks, tuple(points), *_segments(points, changed),
                parity_y=y_of(1.0) if speedup else None)


def _settings_since(rows: list[HistoryRow], kept: list[int]) -> list[tuple[str, ...]]:
    """For each kept row, the settings changed since the kept row before it (a row left out,
    with no speed-up, may be where they changed); nothing for the first."""
    settings = [settings_changed(r) for r in rows]
    since: list[tuple[str, ...]] = []
    before = None
    for at in kept:
        since.append(() if before is None else tuple(dict.fromkeys(
            name for k in range(before + 1, at + 1) for name in settings[k])))
        before = at
    return since


def _segments(points: list[PlotPoint], changed: list[tuple[str, ...]]
              ) -> tuple[tuple[str, ...], tuple[PlotBreak, ...]]:
    """One polyline per run of points measured with the same settings, and a break between
    two runs: a line across a changed token limit or engine config would read as a trend."""
    lines: list[list[PlotPoint]] = []
    breaks = []
    for point, names in zip(points, changed, strict=True):
        if names and lines:
            x = round((lines[-1][-1].x + point.x) / 2, 1)
            breaks.append(PlotBreak(x, f"settings change: {', '.join(names)}"))
        if names or not lines:
            lines.append([])
        lines[-1].append(point)
    return (tuple(" ".join(f"{p.x},{p.y}" for p in line) for line in lines), tuple(breaks))
