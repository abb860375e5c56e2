"""`specfleet replay`'s tables: the `Prediction`s of `report/predictions.py` as markdown, one
row per cell and policy, and each cell's oracle bound."""

from __future__ import annotations

from collections.abc import Sequence

from specfleet.engine.oracle import OracleSchedule
from specfleet.report.grid import md_cell, md_text
from specfleet.report.predictions import Bound, Prediction


def format_predictions(predictions: Sequence[Prediction], costs_name: str) -> str:
    """A markdown table: cell, policy, counters, predicted and measured speed-up, error, and
    the efficiency when the predictions carry the oracle."""
    extra = (" efficiency |", "---|") if any(p.bound for p in predictions) else ("", "")
    lines = [f"Predicted speed-up over plain under {md_text(costs_name)} (whole call, prefill in "
             "pipelined steps from each cell's plain run; measured and error only where the "
             "table was measured on the runs' own host, engine, device and model)", "",
             "| model | target | prompt | policy | rounds | drafted | proposed | accepted | "
             "steps / plain | predicted | measured | error |" + extra[0],
             "|---|---|---|---|---|---|---|---|---|---|---|---|" + extra[1]]
    for p in predictions:
        target, model, prompt = _names(p.cell)
        c = p.counters
        measured = f"{p.measured:.3f}x" if p.measured else "-"
        error = f"{p.error * 100:+.1f}%" if p.error is not None else "-"
        efficiency = f" {p.efficiency:.3f} |" if p.efficiency is not None else ""
        lines.append(
            f"| {model} | {target} | {prompt} | {p.policy} | {c['rounds']} | "
            f"{c['drafted_rounds']} | {c['proposed']} | {c['accepted']} | "
            f"{p.steps:.1f} / {p.plain_steps:.1f} | {p.predicted:.3f}x | {measured} | {error} |"
            f"{efficiency}")
    return "\n".join(lines)


def format_bounds(predictions: Sequence[Prediction], costs_name: str) -> str:
    """A markdown table of each cell's oracle: its index, cost, schedule and ceiling."""
    lines = [f"Oracle bound under {md_text(costs_name)}: the cheapest schedule over each cell's n-gram "
             "index (pipeline mechanics not paid; efficiency = oracle steps / policy steps)", "",
             "| model | target | prompt | index | steps / plain | ceiling | verifies | "
             "proposed | accepted | plain steps | widths |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    seen: list[Bound] = []
    for p in predictions:
        if p.bound is None or any(b is p.bound for b in seen):
            continue
        seen.append(p.bound)
        target, model, prompt = _names(p.cell)
        b, s = p.bound.lookup, p.bound.schedule
        lines.append(
            f"| {model} | {target} | {prompt} | n-gram {b.ngram_min}-{b.ngram_max}, draft <= "
            f"{b.max_draft} | {s.cost_steps:.1f} / {p.plain_steps:.1f} | {p.bound.ceiling:.3f}x | "
            f"{s.verifies} | {s.proposed} | {s.accepted} | {s.plain_steps} | {_widths(s)} |")
    return "\n".join(lines)


def _names(cell: tuple[str, str, str, str, str]) -> tuple[str, str, str]:
    """Target (host/engine/device: a matrix may run one engine on several hosts, each its own
    row), model and prompt as markdown cells: a `|` in a name would split the row."""
    host, engine, device, model, prompt = cell
    return md_cell(f"{host}/{engine}/{device}"), md_cell(model), md_cell(prompt)


def _widths(schedule: OracleSchedule) -> str:
    """The verify widths the oracle used, most used first (`8x12 4x3`: width 8 twelve times)."""
    counts: dict[int, int] = {}
    for step in schedule.steps:
        if step.draft:
            counts[step.draft + 1] = counts.get(step.draft + 1, 0) + 1
    ranked = sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))
    return " ".join(f"{w}x{c}" for w, c in ranked) or "-"
