"""Cells, targets and the table / markdown record of `bench/peers.py`."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from specfleet.engine.stats import loop_share

LOOP_SHARE_FLAG = 0.2  # issue 7: a reply mostly inside a trailing cycle is not a real workload
EDIT_PROMPTS = ("edit_fn", "edit_json")
PROSE_PROMPTS = ("write", "story")
LOOKUP_ARMS = ("sf_auto", "sf_graded", "sf_gated")


@dataclass(frozen=True)
class Cell:
    """One (engine, prompt, arm): its rates, its peer's, specfleet plain's, and parity."""

    engine: str
    prompt: str
    arm: str
    peer: str | None
    alias_of: str | None
    rates: list[float]
    first: Any  # the first repeat's Outcome (tokens, total_s, counters)
    peer_rates: list[float] | None
    plain_rates: list[float]
    parity_ref: str
    parity_tokens: list[int]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def vs_peer(self) -> float | None:
        return _over(self.median, self.peer_rates) if self.peer_rates else None

    @property
    def vs_plain(self) -> float | None:
        return _over(self.median, self.plain_rates)

    @property
    def spread(self) -> float:
        """(max - min) / median of the repeats."""
        return (max(self.rates) - min(self.rates)) / self.median if self.median else 0.0

    @property
    def loop_share(self) -> float:
        return loop_share(self.first.tokens)

    @property
    def parity(self) -> str:
        mine, ref = self.first.tokens, self.parity_tokens
        if mine == ref:
            return "identical"
        index = next((i for i, (a, b) in enumerate(zip(mine, ref, strict=False)) if a != b), None)
        return f"diverges@{min(len(mine), len(ref)) if index is None else index}"

    def targets(self) -> list[tuple[str, float, float]]:
        """(what, measured ratio, bound) for every target this cell has."""
        out = []
        if self.arm == "sf_plain" and self.vs_peer is not None:
            out.append((f"plain vs {self.peer}", self.vs_peer, 0.98))
        if self.arm in LOOKUP_ARMS and self.vs_peer is not None:
            if self.prompt in EDIT_PROMPTS:
                out.append((f"{self.arm} vs {self.peer}", self.vs_peer, 1.0))
            if self.prompt in PROSE_PROMPTS:
                out.append((f"{self.arm} vs {self.peer}", self.vs_peer, 1.10))
        if self.arm == "sf_auto" and self.vs_plain is not None:
            out.append(("sf_auto vs sf_plain", self.vs_plain, 0.98))
        return out

    def missed(self) -> list[str]:
        return [
            f"{self.engine} {self.prompt}: {what} {ratio:.2f}x < {bound:.2f}x"
            + (" (reply loops)" if self.loop_share > LOOP_SHARE_FLAG else "")
            for what, ratio, bound in self.targets()
            if ratio < bound
        ]


def _over(median: float, rates: list[float]) -> float | None:
    """`median` over the median of `rates`; None when that is 0 (every reply empty: a base
    model can stop at once, as Gemma 3 270M does after edit_fn's closing code fence)."""
    base = statistics.median(rates)
    return median / base if base > 0 else None


def _counters(cell: Cell) -> tuple[str, str, str]:
    c = cell.first.counters
    if not c or cell.arm == "sf_plain":
        return "-", "-", "-"
    return (
        f"{c['rounds']}/{c['drafted']}/{c['paused']}",
        f"{c['proposed']}/{c['accepted']}",
        f"{c['tpf']:.2f}",
    )


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _row(cell: Cell) -> list[str]:
    rounds, prop_acc, tpf = _counters(cell)
    rates = ", ".join(f"{r:.1f}" for r in cell.rates)
    marks = " ".join(
        f"{'plain' if what.endswith('sf_plain') else 'peer'}:{'ok' if ratio >= bound else 'MISS'}"
        for what, ratio, bound in cell.targets()
    )
    loop = f"{cell.loop_share:.2f}" + (" LOOP" if cell.loop_share > LOOP_SHARE_FLAG else "")
    arm = cell.arm + (f" (= {cell.alias_of})" if cell.alias_of else "")
    return [
        cell.engine,
        cell.prompt,
        arm,
        str(len(cell.first.tokens)),
        f"{cell.median:.2f} [{rates}]",
        f"{cell.spread:.1%}",
        f"{_ratio(cell.vs_peer)} vs {cell.peer}" if cell.peer else "-",
        _ratio(cell.vs_plain),
        marks or "-",
        rounds,
        prop_acc,
        tpf,
        f"{cell.parity} vs {cell.parity_ref}",
        loop,
    ]


HEADER = [
    "engine",
    "prompt",
    "arm",
    "tok",
    "tok/s median [repeats]",
    "spread",
    "vs peer",
    "vs sf_plain",
    "targets",
    "rounds/drafted/paused",
    "prop/acc",
    "tok/fwd",
    "parity",
    "loop share",
]


def render_table(cells: list[Cell]) -> str:
    """A fixed-width text table for the terminal."""
    rows = [HEADER] + [_row(cell) for cell in cells]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = [
        "  ".join(value.ljust(w) for value, w in zip(row, widths, strict=True)) for row in rows
    ]
    missed = [line for cell in cells for line in cell.missed()]
    lines.append("missed targets: " + ("; ".join(missed) if missed else "none"))
    return "\n".join(lines)


def render_markdown(cells: list[Cell], env: dict[str, str], command: str, repeats: int) -> str:
    """The committed record: command, environment, method, the table, missed targets."""
    table = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    table += ["| " + " | ".join(_row(cell)) + " |" for cell in cells]
    missed = [line for cell in cells for line in cell.missed()]
    env_lines = [f"- {key}: {value}" for key, value in env.items()]
    return "\n".join(
        [
            f"# specfleet vs peers on {env.get('model', 'smollm2-135m')} (fp32)",
            "",
            f"Command: `{command}`",
            "",
            "## Environment",
            *env_lines,
            "",
            "## Method",
            f"One process; the arms of an engine share one loaded model; median of {repeats} "
            "repeats with the arms interleaved and their order rotated every repeat; whole-call "
            "tok/s including prefill; specfleet warms every verify width before each timed call "
            "(untimed) and every arm runs once before timing. Greedy. `vs peer`: specfleet plain "
            "over the peer's plain; specfleet prompt lookup over transformers "
            "`prompt_lookup_num_tokens=10`. Parity: the first repeat's token ids against the named "
            f"arm. Loop share > {LOOP_SHARE_FLAG} (LOOP): the reply ends in a repeated cycle, so "
            "a lookup speed-up there is not a real gain. An arm marked `(= X)` has X's config "
            "and reuses its runs.",
            "",
            "Targets: torch plain >= 0.98x transformers; lookup >= 1.0x transformers lookup on "
            "edit prompts and >= 1.10x on write/story; sf_auto >= 0.98x specfleet plain on every "
            "prompt; MLX plain >= 0.98x mlx-lm.",
            "",
            "## Results",
            *table,
            "",
            "## Missed targets",
            *([f"- {line}" for line in missed] or ["- none"]),
            "",
        ]
    )
