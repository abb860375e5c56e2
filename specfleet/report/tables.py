"""The matrix tables users read: plain tok/s, speed-ups over plain, counters and parity.

Per target, like the reference record: rows model x arm, columns prompts, each
speed-up with its spread beside it. Markers (explained under every table):
`!` spread above 5%, `gain` / `loss` the 90% interval on the speed-up lies above / below 1x,
`within noise` it holds 1x (the rule: `stats/interval.py`), `n=1, no verdict` an arm with fewer
than 3 repeats a side (plain, the baseline, shows its spread), `LOOP` replies loop (kept out
of the headline), `THROTTLED` a run of the cell or of its plain ran on a throttled host,
`=` every repetition identical to plain's first, `≠` one diverged (kept out of the headline,
a peer arm's aside; on plain, its own repetitions differ).
"""

from __future__ import annotations

from dataclasses import asdict
from dataclasses import fields as dataclass_fields
from typing import Any

from specfleet import jsontext
from specfleet.engine.peers import is_peer, peer_kind
from specfleet.errors import UserError
from specfleet.jobs.plan import arm_runs_on
from specfleet.jobs.resolve import counted
from specfleet.report.grid import Grid, check_format, md_text, to_csv, to_markdown, to_rich
from specfleet.report.parity_tables import where_text
from specfleet.stats.cells import SPREAD_FLAG, PeerHeadline, diverged_from_plain
from specfleet.stats.interval import MIN_REPEATS, RULE, RatioInterval, no_verdict_text, side
from specfleet.stats.view import PLAIN, CellView, MatrixView

PIVOTS = (None, "target")
DASH = "–"
RATE_WORDS = {"whole": "whole call incl. prefill",
              "decode": "decode only: generation after the first token, --rate decode"}
LEGEND = (
    f"Speed-up = median tok/s of the arm / median plain tok/s (whole call incl. prefill); "
    f"±x% = (max-min)/median over repeats; ! spread > {SPREAD_FLAG:.0%}; {RULE} "
    f"('n=1, no verdict', n the smaller side's repeats); LOOP = replies loop (kept out of the headline); THROTTLED = a run "
    f"of the cell or of its plain ran on a throttled host "
    f"(clocks capped, thermal state not nominal, on battery or Low Power Mode); "
    f"= every repetition's reply identical to plain's first, ≠ one diverged (kept out of the "
    f"headline unless a peer arm's; on plain: its own repetitions differ)."
)


def pct(value: float | None) -> str:
    return DASH if value is None else f"±{value * 100:.1f}%"


def ratio_places(*ratios: float, off_one: bool, least: int = 2) -> int:
    """Decimals for ratios: `least`, or where a verdict says they are not 1x (`off_one`) as
    many as keep each from reading 1.00, up to five."""
    for places in range(least, 5):
        if not off_one or all(f"{r:.{places}f}" != f"{1:.{places}f}" for r in ratios):
            return places
    return 5


def ratio_text(ratio: float, off_one: bool = False) -> str:
    """`1.39x`; with `off_one` (a verdict says it is not 1x) never `1.00x` (`0.996x loss`)."""
    return f"{ratio:.{ratio_places(ratio, off_one=off_one)}f}x"


def cell_ratio_text(cell: CellView) -> str:
    """A cell's speed-up (`–` without one), never `1.00x` beside its gain or loss."""
    if cell.speedup is None:
        return DASH
    return ratio_text(cell.speedup, cell.verdict in ("gain", "loss"))


def interval_text(low: float, high: float, coverage: float) -> str:
    """`90% interval 0.89-1.21x`: a ratio's interval and its exact coverage; one that
    excludes 1x never reads as if it held it (`0.994-0.998x`, not `0.99-1.00x`)."""
    beyond = side(RatioInterval(low, high, coverage)) in ("above", "below")
    places = ratio_places(low, high, off_one=beyond)
    return f"{coverage:.0%} interval {low:.{places}f}-{high:.{places}f}x"


def speedup_text(cell: CellView | None) -> str:
    """"1.39x ±1.2% =" plus the markers that apply."""
    if cell is None or not cell.rates:
        return DASH
    if cell.arm == PLAIN:  # LOOP, THROTTLED; ≠ where its own repetitions differ
        differ = ["≠"] if cell.parity == "diverged" else []
        return " ".join(["1.00x", spread_text(cell), *verdict_marks(cell), *differ])
    if cell.speedup is None:
        return DASH
    parts = [cell_ratio_text(cell), spread_text(cell), *verdict_marks(cell)]
    if cell.parity:
        parts.append("=" if cell.parity == "identical" else "≠")
    return " ".join(parts)


def verdict_marks(cell: CellView) -> list[str]:
    """The verdict and the marks beside it (`gain LOOP THROTTLED`), as every table says them."""
    marks = [cell.verdict] if cell.verdict in ("gain", "loss", "within noise") else []
    if cell.loop:  # each verdict said: 0.97x may be a loss
        marks.append("LOOP")
    if cell.throttled:
        marks.append("THROTTLED")
    return marks


def spread_text(cell: CellView) -> str:
    """`±1.2%` (with `!` above the flag), or an arm's `n=1, no verdict` under 3 repeats.
    Plain is the baseline no verdict applies to: its spread, `n=1` from one repeat."""
    if cell.arm == PLAIN and cell.n == 1:
        return "n=1"  # one repeat has no spread
    if cell.arm != PLAIN and cell.no_verdict_n is not None:
        return no_verdict_text(cell.no_verdict_n)
    return pct(cell.spread) + ("!" if cell.spread_flag else "")


def parity_text(cell: CellView) -> str:
    """An arm's replies against plain's first: `identical` (every repetition), or where the
    first that differs diverges (`diverges at token 5 (char 9) in repeat 2`)."""
    if cell.parity is None:  # only an arm's cell asks: no verdict (the parity line says why)
        return "not compared"
    if cell.parity == "identical":
        return "identical"
    return f"diverges at {divergence_text(cell)}"


def divergence_text(cell: CellView) -> str:
    """`token 5 (char 9) in repeat 2`: where a cell's first differing repetition diverges."""
    return where_text(cell.diverge_token, cell.diverge_char, cell.diverge_repeat)


def rates_text(cell: CellView) -> str:
    rates = ", ".join(f"{r:.2f}" for r in cell.rates)
    return f"{cell.median_tok_per_s:.2f} [{rates}]"


def plain_grid(view: MatrixView, target: str) -> Grid:
    """Plain decoding tok/s (median over repeats, spread beside it), model x prompt."""
    rows = []
    for model in view.models:
        cells = [view.cell(target, model, p, PLAIN) for p in view.prompts]
        if all(c is None for c in cells):
            continue
        text = [
            DASH if c is None or not c.rates
            else " ".join([f"{c.median_tok_per_s:.1f}", spread_text(c), *verdict_marks(c)])
            for c in cells
        ]
        rows.append((model, *text))
    rate = "" if view.rate == "whole" else ", decode only"
    return Grid(f"Plain decoding, tok/s (median{rate}) — {target}", ("Model", *view.prompts),
                tuple(rows))


def speedup_grid(view: MatrixView, target: str) -> Grid:
    """Speed-up over plain, rows model x arm, columns prompts."""
    rows = []
    for model in view.models:
        for arm in view.arms:
            cells = [view.cell(target, model, p, arm) for p in view.prompts]
            if all(c is None for c in cells):
                continue
            rows.append((model, arm, *(speedup_text(c) for c in cells)))
    notes = (*headline(view, target), *peer_headline(view, target), legend(view.rate))
    return Grid(
        f"Prompt lookup over plain — {target}", ("Model", "arm", *view.prompts), tuple(rows), notes
    )


COUNTERS_LEGEND = (
    "tok = tokens generated; rounds/drafted/paused = decode-loop rounds / those that verified "
    "a draft / those the policy drafted nothing in; prop/acc = draft tokens proposed / "
    "accepted; tpf = tokens per decode forward; shadow conf. = a paused loop's probes that "
    "came true (its way back to drafting); vs plain = every repetition's reply identical to "
    "plain's first, or where the first that differs diverges (plain's row: where its own "
    "repetitions differ from its first, – when they agree); median [rates] = median tok/s "
    "[each repeat's]; decode / prompt tok/s = after the first token / the prefill, medians "
    "over the repeats that have that rate (– none: a one-token reply has no decode rate).")


def counters_grid(view: MatrixView, target: str) -> Grid:
    """Counters of the first repetition and parity of every repetition, one row per model,
    prompt and arm."""
    headers = ("Model / prompt", "arm", "tok", "rounds/drafted/paused", "prop/acc", "acc rate",
               "tpf", "shadow conf.", "vs plain", "median [rates]", "decode / prompt tok/s")
    rows = []
    for model in view.models:
        for prompt in view.prompts:
            first = True
            for arm in view.arms:
                cell = view.cell(target, model, prompt, arm)
                if cell is None or not cell.rates:
                    continue
                rows.append((f"{model} {prompt}" if first else "", arm, *_counter_cols(cell),
                             _beside_text(cell)))
                first = False
    return Grid(f"Counters (first repetition) and parity (every repetition) — {target}",
                headers, tuple(rows), (COUNTERS_LEGEND,))


def _counter_cols(cell: CellView) -> tuple[str, ...]:
    c = cell.counters
    tok = str(c.generated_tokens)
    loop = " LOOP" if cell.loop else ""
    if cell.arm == PLAIN:
        differ = f"repeats differ at {divergence_text(cell)}" if cell.parity == "diverged" else DASH
        return (tok, DASH, DASH, DASH, DASH, DASH, differ, rates_text(cell) + loop)
    if not c.counted:  # a peer arm: no rounds or drafts to show (transformers exposes none)
        return (tok, DASH, DASH, DASH, DASH, DASH, parity_text(cell), rates_text(cell) + loop)
    return (
        tok,
        f"{c.rounds}/{c.drafted_rounds}/{c.paused_rounds}",
        f"{c.proposed}/{c.accepted}",
        f"{c.acceptance_rate:.4f}",
        f"{c.tokens_per_forward:.4f}",
        str(c.shadow_confirmations),
        parity_text(cell),
        rates_text(cell) + loop,
    )


def legend(rate: str = "whole") -> str:
    """The markers under a speed-up table, naming the rate the speed-ups read."""
    return LEGEND.replace(RATE_WORDS["whole"], RATE_WORDS[rate], 1)


def _beside_text(cell: CellView) -> str:
    """Median decode-only and prompt (prefill) tok/s, beside whichever rate leads; 0 is
    none measured (the view's stand-in for no median), shown `–`."""
    return " / ".join(f"{rate:.1f}" if rate else DASH
                      for rate in (cell.median_decode_tok_per_s, cell.median_prompt_tok_per_s))


def headline(view: MatrixView, target: str) -> list[str]:
    """One line per lookup arm: geometric-mean speed-up over cells that neither loop nor
    diverge from plain (from `stats/cells.py`); those are listed apart, never averaged in."""
    lines = []
    order = {arm: i for i, arm in enumerate(view.arms)}
    for item in sorted(view.headlines, key=lambda h: order.get(h.arm, len(order))):
        if item.target != target:
            continue
        if item.geomean_speedup is not None:
            # Every cell a gain (or every one a loss): their mean is no 1.00x either.
            one_way = item.cells > 0 and item.cells in (item.gains, item.losses)
            lines.append(
                f"Headline {item.arm}: {ratio_text(item.geomean_speedup, one_way)} geometric "
                f"mean over {counted(item.cells, 'cell')} ({counted(item.gains, 'gain')}, "
                f"{counted(item.losses, 'loss', 'losses')}, "
                f"{item.within_noise} within noise{_no_verdict_count(item)})"
            )
        looped = [c for c in view.cells if c.target == target and c.arm == item.arm and c.loop
                  and c.speedup is not None]
        if looped:
            apart = ", ".join(f"{c.model}/{c.prompt} {cell_ratio_text(c)}" for c in looped)
            lines.append(f"Kept out of the {item.arm} headline (replies loop): {apart}")
        diverged = [c for c in view.cells if c.target == target and c.arm == item.arm
                    and not c.loop and c.speedup is not None
                    and diverged_from_plain(c.arm, c.parity)]
        if diverged:
            apart = ", ".join(f"{c.model}/{c.prompt} {cell_ratio_text(c)}" for c in diverged)
            lines.append(f"Kept out of the {item.arm} headline (reply ≠ plain): {apart}")
    return lines


def _no_verdict_count(item) -> str:
    return (f", {item.no_verdict} under {MIN_REPEATS} repeats: no verdict" if item.no_verdict
            else "")


def peer_headline(view: MatrixView, target: str) -> list[str]:
    """`Against peers: graded 1.18x hf-lookup ...`: our best arm over the best peer arm, over
    the cells both measured (`stats.cells.versus_peers`), or that they share none; nothing
    when the target ran no peer arm."""
    return [_peer_line(item) for item in view.versus_peers if item.target == target]


def _peer_line(item: PeerHeadline) -> str:
    if item.ratio is None:
        return (f"Against peers: {item.ours} and {item.peer} measured no cell in common: no "
                "ratio (each headline above is over its own cells)")
    return (f"Against peers: {item.ours} {item.ratio:.2f}x {item.peer} (geometric-mean "
            f"speed-ups over plain on the {counted(item.cells, 'cell')} both measured: "
            f"{item.ours} {item.ours_speedup:.2f}x, {item.peer} {item.peer_speedup:.2f}x)")


def noisy_summary(view: MatrixView) -> str | None:
    """Names the cells with runs timed on a busy host (`--require-quiet` waits instead)."""
    noisy = [c for c in view.cells if c.noisy_runs]
    if not noisy:
        return None
    cells = "; ".join(f"{c.target} {c.model}/{c.prompt} {c.arm}: {c.noisy_runs} of {c.n}"
                      for c in noisy)
    return f"Noisy runs (timed while the host was busy; --require-quiet waits instead): {cells}."


PIVOT_NOTE = "Each target: plain tok/s · speed-up ±spread · acceptance rate · parity vs plain."
# As the pivot table shows them: the speed-up with its verdict, interval, spread and repeats,
# and the marks beside it (LOOP, THROTTLED: the speed-up may not hold).
PIVOT_FIELDS = ("plain_tok_per_s", "speedup", "verdict", "speedup_low", "speedup_high",
                "spread", "n", "acceptance_rate", "parity", "loop", "throttled")


def pivot_cols(view: MatrixView, targets: tuple[str, ...], model: str, prompt: str,
               arm: str) -> tuple[str, ...] | None:
    """One pivot row's text per target; None when no target measured this arm there."""
    if all(view.cell(t, model, prompt, arm) is None for t in targets):
        return None
    cols = tuple(_pivot_text(view, t, model, prompt, arm) for t in targets)
    return cols if any(col != DASH for col in cols) else None


def _pivot_text(view: MatrixView, target: str, model: str, prompt: str, arm: str) -> str:
    plain = view.cell(target, model, prompt, PLAIN)
    cell = view.cell(target, model, prompt, arm)
    if cell is None and plain is None:
        return DASH
    base = f"{plain.median_tok_per_s:.1f} tok/s" if plain and plain.rates else DASH
    if cell is None:
        kind = peer_kind(arm)
        if kind is not None and not arm_runs_on(arm, target.split("/")[1]):  # HOST/ENGINE/DEVICE
            return f"{base} · runs on {kind.runs_on} only"  # never planned on this target
        return f"{base} · no done run"  # failed, pending or cancelled here
    acc = cell.counters.acceptance_rate if cell.counters.proposed else None
    return f"{base} · {speedup_text(cell)} · acc {DASH if acc is None else f'{acc:.2f}'}"


def parity_summary(view: MatrixView, why_not_compared: tuple[str, ...] = ()) -> str:
    """One line: how many replies were compared (every repetition), how many arm cells equal
    plain's, how many of ours diverged (and where to get the forensics), on how many cells
    plain's own repetitions differ, how many were not compared and why (`why_not_compared`:
    each such cell's reason, as `parity` words it; where they differ or are not given,
    `parity` is named instead), and how many peer replies differ (information, not a
    failure)."""
    compared = [c for c in view.cells if c.parity is not None and c.arm != PLAIN]
    identical = sum(c.parity == "identical" for c in compared)
    diverged = sum(c.parity == "diverged" and not is_peer(c.arm) for c in compared)
    peers_differ = sum(c.parity == "diverged" and is_peer(c.arm) for c in compared)
    plains_differ = sum(c.arm == PLAIN and c.parity == "diverged" for c in view.cells)
    # Each cell in a view has a done run: an arm's without a verdict was not compared.
    not_compared = sum(c.arm != PLAIN and c.parity is None for c in view.cells)
    replies = counted(sum(c.parity_replies for c in view.cells), "reply", "replies")
    line = (f"Parity vs plain (every repetition, {replies} compared): {identical} identical, "
            f"{diverged} diverged")
    if diverged:
        line += f"; `specfleet parity {view.matrix_id}` replays each divergence (near-tie or suspect)"
    if plains_differ:
        line += (f"; plain's own repetitions differ on {counted(plains_differ, 'cell')} (greedy "
                 f"plain decoding is not deterministic there: `specfleet parity "
                 f"{view.matrix_id}` fails)")
    if not_compared:
        one_why = len(why_not_compared) == not_compared and len(set(why_not_compared)) == 1
        line += (f"; {not_compared} not compared: {why_not_compared[0]}" if one_why else
                 f"; {not_compared} not compared (`specfleet parity {view.matrix_id}` says why)")
    if peers_differ:
        differ = "reply differs" if peers_differ == 1 else "replies differ"
        line += (f"; {peers_differ} peer {differ} (another library's decoding: information, "
                 "not a failure)")
    return line + "."


def grids_for(view: MatrixView, why_not_compared: tuple[str, ...] = ()) -> list[Grid]:
    """The tables of a matrix in reading order, target by target (the pivot, targets side by
    side, is `report.results.render_matrix`'s, a row per token limit); `why_not_compared`
    as `parity_summary`'s."""
    grids = []
    for target in view.targets:
        grids += [plain_grid(view, target), speedup_grid(view, target), counters_grid(view, target)]
    if grids:
        last = grids[-1]
        footer = [parity_summary(view, why_not_compared), noisy_summary(view)]
        grids[-1] = Grid(last.title, last.headers, last.rows,
                         (*last.notes, *(line for line in footer if line)), last.left_cols)
    return grids


def cell_record(cell: CellView) -> dict:
    """One cell as a flat dict (json / csv)."""
    # One level deep by hand: asdict's recursive deep copy was most of a 400-cell JSON page.
    record = {f.name: getattr(cell, f.name) for f in dataclass_fields(cell) if f.name != "shown"}
    record.update(asdict(cell.shown))
    record["n"] = cell.n
    record.update(asdict(record.pop("counters")))
    record["acceptance_rate"] = cell.counters.acceptance_rate
    record["tokens_per_forward"] = cell.counters.tokens_per_forward
    record["rates"] = list(cell.rates)
    return record


def cell_record_fields() -> list[str]:
    """The keys of every `cell_record`, in order: the CSV header even when no cell is done,
    so a script reads the same columns from an empty matrix as from a full one."""
    return list(cell_record(CellView("", "", "", "", (), 0.0, 0.0)))


def pivot_record(view: MatrixView, targets: tuple[str, ...], model: str, prompt: str,
                 arm: str) -> dict | None:
    """One pivot row as a dict, its figures per target; None when no target has any."""
    per_target = {}
    for target in targets:
        plain = view.cell(target, model, prompt, PLAIN)
        cell = view.cell(target, model, prompt, arm)
        if cell is None and plain is None:
            continue
        # Nothing proposed has no acceptance rate (the table's `acc –`), not 0.0.
        accepted = cell.counters.acceptance_rate if cell and cell.counters.proposed else None
        per_target[target] = {
            "plain_tok_per_s": plain.median_tok_per_s if plain else None,
            "speedup": cell.speedup if cell else None,
            "verdict": cell.verdict if cell else None,
            "speedup_low": cell.speedup_low if cell else None,
            "speedup_high": cell.speedup_high if cell else None,
            "spread": cell.spread if cell else None,
            "n": cell.n if cell else None,
            "acceptance_rate": accepted,
            "parity": cell.parity if cell else None,
            "loop": cell.loop if cell else None,
            "throttled": cell.throttled if cell else None,
        }
    if not per_target:
        return None
    return {"model": model, "prompt": prompt, "arm": arm, "targets": per_target}


def pivot_csv(targets: tuple[str, ...], records: list[dict],
              keys: tuple[str, ...] = ("model", "prompt", "arm")) -> str:
    """Pivot records as CSV: the row's `keys`, then one `TARGET:FIELD` column per target and
    field."""
    headers = [*keys] + [f"{t}:{f}" for t in targets for f in PIVOT_FIELDS]
    rows = [
        [r[key] for key in keys]
        + [r["targets"].get(t, {}).get(f) for t in targets for f in PIVOT_FIELDS]
        for r in records
    ]
    return to_csv(headers, rows)


def _csv(view: MatrixView) -> str:
    records = [cell_record(c) for c in view.cells]
    headers = cell_record_fields()
    rows = [[csv_value(r[h]) for h in headers] for r in records]
    return to_csv(headers, rows)


def csv_value(value):
    """A list (a cell's rates) as one CSV field: `100;101;99`."""
    return ";".join(f"{v:g}" for v in value) if isinstance(value, list) else value


def check_pivot(pivot: str | None) -> None:
    """Refuse an unknown `--pivot` in one line, before any store is read for it."""
    if pivot not in PIVOTS:
        raise UserError(f"--pivot: unknown pivot {pivot!r}; expected 'target'")


def render_view(view: MatrixView, fmt: str = "table",
                why_not_compared: tuple[str, ...] = ()) -> str:
    """Render a `MatrixView` in one of `OUTPUT_FORMATS` (see `report.results.render_matrix`;
    `why_not_compared` as `parity_summary`'s)."""
    check_format(fmt)
    heading = f"Matrix {view.matrix_id} ({view.name})"
    if not view.cells and fmt in ("table", "markdown"):
        return f"{heading}: no done runs yet (`specfleet matrix status {view.matrix_id}`)\n"
    if fmt == "table":
        return to_rich(grids_for(view, why_not_compared), heading)
    if fmt == "markdown":
        return to_markdown(grids_for(view, why_not_compared), f"## {md_text(heading)}")
    if fmt == "csv":
        return _csv(view)
    return jsontext.dumps(view_body(view), indent=2, default=str) + "\n"


def view_body(view: MatrixView) -> dict[str, Any]:
    """What `render_view(view, "json")` writes, as the object (the web API sends it without a
    text round trip)."""
    body: dict[str, Any] = {"matrix_id": view.matrix_id, "name": view.name,
                            "targets": list(view.targets), "rate": view.rate}
    body["cells"] = [cell_record(c) for c in view.cells]
    body["headline"] = {t: [*headline(view, t), *peer_headline(view, t)]
                        for t in view.targets}
    # A headline's cell ratios are its cells' speed-ups, each already in "cells".
    body["headlines"] = [{k: v for k, v in asdict(h).items() if k != "ratios"}
                         for h in view.headlines]
    return body
