"""PNG plots of a matrix (matplotlib, Agg backend): a speed-up heatmap per target and the
per-run tok/s of every arm."""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from specfleet.engine.peers import PEER_KINDS
from specfleet.engine.policies import POLICIES
from specfleet.report.tables import ratio_text
from specfleet.stats.interval import MIN_REPEATS
from specfleet.stats.view import PLAIN, MatrixView

if TYPE_CHECKING:
    from matplotlib import pyplot


# Fonts holding what DejaVu Sans lacks (CJK names), tried glyph by glyph where installed.
FALLBACK_FONTS = ("Noto Sans CJK JP", "Noto Sans CJK SC", "Hiragino Sans", "PingFang SC",
                   "Arial Unicode MS", "Microsoft YaHei", "Malgun Gothic")


def _pyplot() -> pyplot:
    """matplotlib on its Agg backend (files only; never a display), imported when a plot is
    drawn: it takes ~1 s, and every CLI command imports this module."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import font_manager

    installed = {font.name for font in font_manager.fontManager.ttflist}
    matplotlib.rcParams["font.family"] = ["DejaVu Sans",
                                          *(f for f in FALLBACK_FONTS if f in installed)]
    return plt


# A plot's label is cut here ("…"): one 128-character prompt name made a 6,900-pixel heatmap.
LABEL_CHARS = 40


def short(text: str) -> str:
    """`text`, each line cut to `LABEL_CHARS` by an ellipsis in its middle, keeping both ends
    (a model folder's path ends in its name); the markdown has it whole."""
    head = (LABEL_CHARS - 1) // 2
    tail = LABEL_CHARS - 1 - head
    return "\n".join(line if len(line) <= LABEL_CHARS else f"{line[:head]}…{line[-tail:]}"
                     for line in text.split("\n"))


# The arms that are not a policy or a peer; a policy's or peer's colour is on its class.
_MODE_COLORS = {"plain": "#555555", "auto": "#2ca02c", "fixed": "#9467bd"}


def arm_color(arm: str) -> str:
    """The colour of `arm`'s points: a policy's and a peer's own (`color` on its class),
    else the mode's; grey for one none names."""
    if arm in POLICIES:
        return POLICIES[arm].color
    if arm in PEER_KINDS:
        return PEER_KINDS[arm].color
    return _MODE_COLORS.get(arm, "#333333")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


VERDICT_MARKS = {"gain": "▲", "loss": "▼", "within noise": "~"}


def _marks(cell) -> str:
    marks = []
    if cell.no_verdict_n is not None:  # as the tables' `n=1, no verdict`
        marks.append(f"n={cell.no_verdict_n}")
    # A gain's or loss's colour is its size: a 0.99x loss is as pale as 1.0x without its mark.
    marks.extend(VERDICT_MARKS[v] for v in (cell.verdict,) if v in VERDICT_MARKS)
    if cell.spread_flag:
        marks.append("!")
    if cell.loop:
        marks.append("L")
    if cell.throttled:  # the tables' THROTTLED
        marks.append("T")
    if cell.parity == "diverged":
        marks.append("≠")
    return " ".join(marks)


def cell_label(cell) -> str:
    """A heatmap cell's text: `1.50x` over its marks (`n=1 ! ≠`)."""
    off_one = cell.verdict in ("gain", "loss")  # as the tables: a loss never reads 1.00x
    return f"{ratio_text(cell.speedup, off_one)}\n{_marks(cell)}".strip()


def heat_legend(cells) -> str:
    """The marks under a heatmap's title; `n=1` explained when a cell shows one."""
    # Two lines: one would run into the colour bar's label on a two-prompt heatmap.
    line = ("▲ gain  ▼ loss (colour: its size)  ~ within noise (grey)\n"
            "! spread>5%  L loop (grey)  ≠ diverged")
    cells = list(cells)
    if any(c.throttled for c in cells):
        line += "\nT throttled: a run of the cell or of its plain ran on a throttled host"
    few = sorted({c.no_verdict_n for c in cells if c.no_verdict_n is not None})
    if few:
        shown = ", ".join(f"n={n}" for n in few)
        line += f"\n{shown} (hatched blue-grey): under {MIN_REPEATS} repeats a side, no verdict"
    return line


_NICE_RATIOS = (1.05, 1.1, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0)


def bar_ticks(limit: float) -> list[float]:
    """Round speed-ups for a colour bar spanning 2**-limit..2**limit, mirrored about 1x: the
    largest round ratio inside it and one about halfway (in log) to it, never odd ends such
    as 3.28x and 0.31x."""
    top = max(r for r in _NICE_RATIOS if np.log2(r) <= limit + 1e-9 or r == _NICE_RATIOS[0])
    middle = min(_NICE_RATIOS, key=lambda r: abs(np.log2(r) - np.log2(top) / 2))
    inside = sorted({r for r in (middle, top) if r <= top})
    return [1 / r for r in reversed(inside)] + [1.0] + inside


def _text_in(texts, fontsize: float) -> float:
    """About how many inches the longest line of `texts` takes at `fontsize` points."""
    longest = max((len(line) for text in texts for line in text.split("\n")), default=0)
    return longest * fontsize * 0.6 / 72  # DejaVu Sans averages ~0.6 em a character


def _luminance(rgba) -> float:
    """WCAG relative luminance of an RGB(A) colour with channels in 0..1."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (linear(c) for c in rgba[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def text_color(rgba) -> str:
    """Black or white, whichever reads better on `rgba`: the scale's ends (the largest gain
    and loss of every heatmap) are too dark for black text (3:1 on its darkest green)."""
    return "white" if _luminance(rgba) < 0.179 else "black"  # where both contrasts are equal


# The fills of a speed-up that is no gain or loss, in the record's PNG and the web view alike.
WITHIN_NOISE_FILL = "#e8e8e8"
NO_VERDICT_FILL = "#dde5ee"  # blue-grey: under 3 repeats a side
LOOP_FILL = "#dddddd"  # the heatmap's background: replies that loop, kept out of the scale


def neutral_fill(cell) -> str | None:
    """The fill of a cell whose speed-up is no gain or loss: grey within noise, blue-grey
    without a verdict; None for a gain or a loss, which is coloured by its size."""
    if cell.verdict == "within noise":
        return WITHIN_NOISE_FILL
    return None if cell.verdict in ("gain", "loss") else NO_VERDICT_FILL


def _heat_data(view: MatrixView, target: str, rows: list[tuple[str, str]],
               prompts: list[str]) -> np.ndarray:
    """log2 speed-ups of the gains and losses; NaN elsewhere: nothing measured, replies that
    loop (the axes' grey), a speed-up within noise or without a verdict (`neutral_fill`)."""
    data = np.full((max(len(rows), 1), len(prompts)), np.nan)
    for i, (model, arm) in enumerate(rows):
        for j, prompt in enumerate(prompts):
            cell = view.cell(target, model, prompt, arm)
            if (cell is not None and cell.speedup and not cell.loop
                    and neutral_fill(cell) is None):
                data[i, j] = np.log2(cell.speedup)
    return data


def speedup_heatmap(view: MatrixView, target: str, path: Path) -> Path:
    """Rows model x lookup arm, columns prompts; a gain or loss coloured by its speed-up over
    plain on a log scale centred on 1.0x, a speed-up within noise or without a verdict grey
    as in the web view (its size is no finding), looping cells grey (kept out of the scale, as
    out of the headline)."""
    rows = [(m, a) for m in view.models for a in view.lookup_arms
            if any(view.cell(target, m, p, a) for p in view.prompts)]
    # Only the prompts this target ran: a prompt kept to other engines is no grey "loop" cell.
    prompts = [p for p in view.prompts if any(view.cell(target, m, p, a) for m, a in rows)]
    if not prompts:  # only plain done here: no speed-up, and an empty image warns
        return _nothing_to_map(target, path)
    data = _heat_data(view, target, rows, prompts)
    finite = data[np.isfinite(data)]
    limit = max(float(np.abs(finite).max()) if finite.size else 0.0, np.log2(1.1))
    labels = [short(f"{m} · {a}") for m, a in rows]
    # Columns as wide as their prompt's name and the row labels beside them, so long names
    # never squeeze the cells into each other.
    column_in = max(1.4, _text_in([short(p) for p in prompts], 10) + 0.3)
    plt = _pyplot()
    from matplotlib.colors import to_rgba

    fig, ax = plt.subplots(figsize=(
        max(5.5, _text_in(labels, 10) + 1.8 + column_in * len(prompts)),
        max(2.6, 1.6 + 0.55 * len(rows))))
    ax.set_facecolor(LOOP_FILL)
    image = ax.imshow(data, cmap="RdYlGn", vmin=-limit, vmax=limit, aspect="auto")
    shown = [(i, j, cell) for i, (model, arm) in enumerate(rows)
             for j, prompt in enumerate(prompts)
             if (cell := view.cell(target, model, prompt, arm)) is not None
             and cell.speedup is not None]
    for i, j, cell in shown:
        fill = LOOP_FILL if cell.loop else neutral_fill(cell)
        if fill is not None:  # hatched without a verdict, as the legend says
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=fill,
                                       hatch="//" if cell.no_verdict_n is not None else None,
                                       edgecolor="#00000033", linewidth=0))
        finite = np.isfinite(data[i, j])
        under = image.to_rgba(data[i, j]) if finite else to_rgba(fill or LOOP_FILL)
        ax.text(j, i, cell_label(cell), ha="center", va="center", fontsize=8,
                color=text_color(under))
    ax.set_xticks(range(len(prompts)), [short(p) for p in prompts])
    ax.set_yticks(range(len(rows)), labels)
    ax.set_title(f"Speed-up over plain (median arm tok/s / median plain tok/s) — {target}\n"
                 f"{heat_legend(c for _, _, c in shown)}", fontsize=9)
    # A short label: it must fit beside a one-row heatmap's colour bar.
    bar = fig.colorbar(image, ax=ax, label="speed-up (log scale)", fraction=0.046, pad=0.04)
    ticks = bar_ticks(limit)
    bar.set_ticks(np.log2(ticks), labels=[f"{t:.2f}x" if t < 1 else f"{t:g}x" for t in ticks])
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the colour bar's label kept whole
    plt.close(fig)
    return path


def _nothing_to_map(target: str, path: Path) -> Path:
    """The heatmap of a target where no lookup arm has a done run beside plain's: says so."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 2.0))
    ax.set_axis_off()
    ax.set_title(f"Speed-up over plain — {target}", fontsize=9)
    ax.text(0.5, 0.5, "no speed-up to show: no lookup arm has a done run\nbeside plain's "
            "on this target", ha="center", va="center", fontsize=9)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


RUNS_KEY = "each dot one run (x: its replies loop), each bar the median of the arm's runs"


def run_scatter(view: MatrixView, target: str, path: Path) -> Path:
    """Per-run tok/s of every arm, grouped by model and prompt; a bar marks each median."""
    groups = [(m, p) for m in view.models for p in view.prompts
              if view.cell(target, m, p, PLAIN) or any(view.cell(target, m, p, a)
                                                       for a in view.arms)]
    # Only the arms this target ran, so each group's tick sits under its middle.
    arms = [a for a in view.arms if any(view.cell(target, m, p, a) for m, p in groups)]
    width = 0.8 / max(len(arms), 1)
    ticks = [short(f"{m}\n{p}") for m, p in groups]
    # A group as wide as its label, so long model names never run into each other.
    group_in = max(1.1, _text_in(ticks, 8) + 0.3)
    plt = _pyplot()
    legend_in = _text_in(arms, 8) + 0.6
    fig, ax = plt.subplots(figsize=(max(5.5, 1.2 + legend_in + group_in * len(groups)), 4.0))
    labelled: set[str] = set()
    for k, arm in enumerate(arms):
        for g, (model, prompt) in enumerate(groups):
            cell = view.cell(target, model, prompt, arm)
            if cell is None or not cell.rates:
                continue
            x = g - 0.4 + width * (k + 0.5)
            xs = x + np.linspace(-width / 4, width / 4, len(cell.rates))
            ax.scatter(xs, cell.rates, s=14, color=arm_color(arm),
                       marker="x" if cell.loop else "o")
            if arm not in labelled:  # a dot in the legend, even where the first cell loops
                ax.scatter([], [], s=14, color=arm_color(arm), marker="o", label=arm)
                labelled.add(arm)
            ax.hlines(cell.median_tok_per_s, x - width / 2.5, x + width / 2.5,
                      color=arm_color(arm))
    ax.set_xticks(range(len(groups)), ticks, fontsize=8)
    ax.set_ylabel("tok/s (whole call, prefill included)")
    ax.set_title(f"Per-run tok/s by arm — {target}\n{RUNS_KEY}", fontsize=9)
    # Beside the axes, not "best" inside them: inside, many arms would hide a group's dots.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    # From 0: an axis cut just below the slowest run makes a 3% difference look like 3x.
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")  # the legend beside the axes kept whole
    plt.close(fig)
    return path


PLOTS = (("speedup", speedup_heatmap), ("runs", run_scatter))


def plot_files(view: MatrixView, out_dir: Path) -> list[Path]:
    """The files `write_plots` writes, in order: one name per target, numbered where two
    targets' slugs meet (hosts `a.b` and `a-b`), lest one's plots replace the other's."""
    names: list[str] = []
    for target in view.targets:
        name, n = slug(target), 1
        while name in names:
            n += 1
            name = f"{slug(target)}-{n}"
        names.append(name)
    return [out_dir / f"{kind}-{name}.png" for name in names for kind, _ in PLOTS]


@dataclass(frozen=True)
class WrittenPlots:
    """The files `write_plots` wrote, and the characters of their labels no installed font
    holds (drawn as boxes)."""

    paths: tuple[Path, ...]
    missing_glyphs: tuple[str, ...] = ()


_MISSING_GLYPH = re.compile(r"Glyph (\d+) .*missing from font")


def write_plots(view: MatrixView, out_dir: Path) -> WrittenPlots:
    """Both plots for every target; matplotlib's warning per missing glyph and draw call
    (dozens for one CJK prompt name) is gathered into `missing_glyphs` instead."""
    draws = [(draw, target) for target in view.targets for _, draw in PLOTS]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        paths = tuple(draw(view, target, path) for (draw, target), path
                      in zip(draws, plot_files(view, out_dir), strict=True))
    missing: dict[str, None] = {}
    for warning in caught:
        if match := _MISSING_GLYPH.match(str(warning.message)):
            if (glyph := chr(int(match[1]))).isprintable():  # a tab has no glyph to miss
                missing[glyph] = None
        else:  # any other warning as matplotlib gave it
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno)
    return WrittenPlots(paths, tuple(missing))
