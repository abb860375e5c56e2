"""Parity verdicts as tables (rich, markdown) or JSON."""

from __future__ import annotations

from dataclasses import asdict, fields

from specfleet import jsontext
from specfleet.engine.forensics import BF16_STEPS
from specfleet.jobs.resolve import counted
from specfleet.report.grid import Grid, check_format, to_csv, to_markdown, to_rich
from specfleet.report.parity import PEER_DIFFERS, ArmParity, ParityReport, PlainDiffers

DASH = "–"
NOT_COMPARED = "not compared"  # a planned pair's CSV verdict when a side has no done run
PLAIN_REPEATS_DIFFER = "plain repeats differ"  # a plain cell's CSV verdict when they do


def where_text(token: int | None, char: int | None, repeat: int | None = None) -> str:
    """`token 5 (char 9)`, with ` in repeat 2` where the repetition that differs is known."""
    char_text = f" (char {char})" if char is not None else ""
    where = f"token {token}{char_text}" if token is not None else f"char {char}"
    return where + (f" in repeat {repeat}" if repeat is not None else "")


def forensics_text(item: ArmParity, replays_tried: bool = True) -> str:
    """The competing tokens and their logit gaps on both paths (`replays_tried` False: the
    check sent no divergence to a replayer, as with --no-replay or in the web view)."""
    if item.replay is None:
        if item.verdict != "unverified":
            return DASH
        if not replays_tried:
            return "not replayed here (`specfleet parity ID` replays it on its target)"
        return "not replayed: no worker for this host here (pass --address HEAD)"
    m, r = item.replay.margins, item.replay
    worst = max((m.a, m.b), key=lambda path: path.lead)
    # A third token ahead of both: the replay reproduced neither reply (said, not hidden).
    ahead = (f"; the replay's best token (id {worst.top2[0][0]}) leads both by "
             f"{worst.lead:.4f}: neither reply reproduced"
             if worst.lead > 0 else "")
    return (
        f"plain {r.text_a!r} vs {item.arm} {r.text_b!r}; gap {m.a.gap:+.4f} on plain's path "
        f"(top-2 margin {m.a.margin:.4f}), {m.b.gap:+.4f} on a width-{m.b.width} verify "
        f"(margin {m.b.margin:.4f}){ahead}"
    )


def arm_grid(report: ParityReport) -> Grid:
    rows = []
    for item in report.arms:
        where = (DASH if item.verdict == "identical"
                 else where_text(item.token, item.char, item.repeat))
        rows.append((item.target, item.model, item.prompt, item.arm, item.verdict, where,
                     item.excerpt or DASH, forensics_text(item, report.replays_tried)))
    note = (
        f"near-tie: the two competing tokens are within {report.threshold} logits (on "
        f"bfloat16 logits at least {BF16_STEPS} bf16 steps at their magnitude) of each other "
        f"and of the row's best on both "
        f"paths (a verify row rounded a near-tie the other way, docs/engine.md 'Parity and near-ties'); suspect: anything "
        f"else; unverified: the divergence could not be replayed on its target."
    )
    return Grid("Parity against plain on the same target (every repetition against plain's "
                "first)",
                ("target", "model", "prompt", "arm", "verdict", "first divergence",
                 "text there", "forensics"),
                tuple(rows), (summary_line(report), note), left_cols=8)


def uncompared_grid(report: ParityReport) -> Grid:
    rows = tuple((u.target, u.model, u.prompt, u.arm, u.why) for u in report.uncompared)
    return Grid("Pairs not compared (no pair of done runs to hold together: no evidence, the "
                "check fails)",
                ("target", "model", "prompt", "arm", "why"), rows, left_cols=5)


def plain_repeats_text(item: PlainDiffers) -> str:
    """`plain repeats differ at token 7 (char 30) in repeat 1 on h/torch/cpu m p`."""
    return (f"{PLAIN_REPEATS_DIFFER} at {where_text(item.token, item.char, item.repeat)} on "
            f"{item.target} {item.model} {item.prompt}")


def plain_differs_grid(report: ParityReport) -> Grid:
    rows = tuple((d.target, d.model, d.prompt, where_text(d.token, d.char, d.repeat),
                  d.excerpt or DASH) for d in report.plain_differs)
    return Grid("Plain replies that differ between repetitions (greedy plain decoding is not "
                "deterministic on that target: no reply to hold the arms to; the check fails)",
                ("target", "model", "prompt", "differs from plain's first at", "text there"),
                rows, left_cols=5)


def cross_grid(report: ParityReport) -> Grid:
    rows = tuple(
        (c.model, c.prompt, c.target_a, c.target_b,
         "agree" if c.agree else f"diverge at {where_text(c.token, c.char)}")
        for c in report.cross
    )
    return Grid("Plain replies across targets", ("model", "prompt", "target A", "target B",
                                                 "verdict"), rows, left_cols=5)


def regression_grid(report: ParityReport) -> Grid:
    rows = tuple(
        (r.target, r.model, r.prompt, r.arm, where_text(r.token, r.char))
        for r in report.regressions
    )
    return Grid(f"Regressions against baseline {report.baseline_id} (identical there, not now)",
                ("target", "model", "prompt", "arm", "now diverges at"), rows, left_cols=5)


def summary_line(report: ParityReport) -> str:
    counts = ", ".join(f"{report.count(v)} {v}"
                       for v in ("identical", "near-tie", "suspect", "unverified"))
    if report.count(PEER_DIFFERS):  # reported, passes: another library decoded these
        counts += f", {report.count(PEER_DIFFERS)} {PEER_DIFFERS} (a peer arm; passes)"
    replies = counted(report.replies, "reply", "replies")
    line = f"Parity of {report.matrix_id} (every repetition, {replies} compared): {counts}"
    if report.plain_differs:  # fails: greedy plain itself replied two ways
        first, rest = report.plain_differs[0], len(report.plain_differs) - 1
        more = f" and on {counted(rest, 'more cell')}" if rest else ""
        line += (f"; {plain_repeats_text(first)}{more} (greedy plain decoding is not "
                 "deterministic there; fails)")
    if report.baseline_id is not None:
        line += f"; {counted(len(report.regressions), 'regression')} against {report.baseline_id}"
        if (found := report.baseline_coverage) is not None:
            line += f" ({found.compared} of {found.planned} {found.unit} found in the baseline)"
    if report.coverage is not None:
        line += f"; {report.coverage.text()}"
    return line


def coverage_gap_text(report: ParityReport) -> str:
    """Why a check that left planned pairs uncompared fails: the first such pair and why,
    or that nothing but plain was planned."""
    coverage = report.coverage
    assert coverage is not None  # only asked of a report that counted its pairs
    if coverage.planned == 0:
        return (f"parity: {report.matrix_id} planned no arm besides plain: no pair to compare; "
                "exit 1: a check that compares nothing is no pass")
    why = ""
    if report.uncompared:
        first, rest = report.uncompared[0], len(report.uncompared) - 1
        more = f"; and {rest} more" if rest else ""
        why = f" ({first.target} {first.model} {first.prompt} {first.arm}: {first.why}{more})"
    return f"parity: {coverage.text()}; exit 1: a pair not compared is no evidence{why}"


def baseline_gap_text(report: ParityReport) -> str:
    """Why a baseline that lacks some pairs fails the check: the targets it never ran on
    beside those it did (a host named otherwise), else the first pair it lacks."""
    found = report.baseline_coverage
    assert found is not None  # only asked of a report checked against a baseline
    ran = set(report.baseline_targets)
    absent = sorted({key.target for key in report.baseline_missing} - ran)
    lacking = [key for key in report.baseline_missing if key.target in ran]
    why = []
    if absent:
        only = f", only on {', '.join(report.baseline_targets)}" if ran else ""
        why.append(f"the baseline has no done run on {', '.join(absent)}{only}")
    if lacking:
        more = f" and {len(lacking) - 1} more" if len(lacking) > 1 else ""
        why.append(f"it has no pair to compare {' '.join(lacking[0])} with{more}")
    reason = f" ({'; '.join(why)})" if why else ""
    return (f"parity: {found.compared} of {found.planned} {found.unit} found in the baseline "
            f"{report.baseline_id}; exit 1: a pair missing from the baseline is no "
            f"evidence{reason}")


def _csv_field(value):
    """A replay's forensics (a nested record) as JSON text in its one CSV field, not Python's
    repr of a dict."""
    return jsontext.dumps(value) if isinstance(value, dict) else value


def render_parity(report: ParityReport, fmt: str = "table") -> str:
    """The parity report in `fmt`: "table", "markdown", "json" or "csv" (one row per planned
    pair, and one per plain whose repetitions differ)."""
    check_format(fmt)
    if fmt == "csv":  # a row per planned pair: those not compared read `not compared`, why
        records = [asdict(arm) for arm in report.arms] + [
            {**asdict(u), "verdict": NOT_COMPARED} for u in report.uncompared] + [
            {**asdict(d), "arm": "plain", "verdict": PLAIN_REPEATS_DIFFER}
            for d in report.plain_differs]
        headers = [f.name for f in fields(ArmParity)] + ["why"]  # the same columns when none
        return to_csv(headers, [[_csv_field(r.get(h)) for h in headers] for r in records])
    if fmt == "json":
        body = asdict(report)
        body["summary"] = summary_line(report)
        return jsontext.dumps(body, indent=2) + "\n"
    grids = [arm_grid(report)]
    if report.plain_differs:
        grids.append(plain_differs_grid(report))
    if report.uncompared:
        grids.append(uncompared_grid(report))
    if report.cross:
        grids.append(cross_grid(report))
    if report.regressions:  # none is said by the summary line, not by an empty table
        grids.append(regression_grid(report))
    heading = f"Parity — matrix {report.matrix_id}"
    return to_rich(grids, heading) if fmt == "table" else to_markdown(grids, f"## {heading}")
