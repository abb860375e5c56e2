"""`specfleet report ID`: a markdown record of a matrix, in the spirit of the reference's
`docs/benchmark_results/` file, with PNG plots and the raw runs as CSV beside it."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from specfleet.engine.stats import decode_tok_per_s
from specfleet.errors import UserError
from specfleet.report.build import done_runs, load_matrix, matrix_view, stored_plan_order
from specfleet.report.grid import Grid, md_text, to_markdown
from specfleet.report.parity import PEER_DIFFERS, ArmParity, check_parity, error_line
from specfleet.report.parity_tables import (
    cross_grid,
    plain_differs_grid,
    summary_line,
    uncompared_grid,
    where_text,
)
from specfleet.report.plots import plot_files, write_plots
from specfleet.report.results import limit_layers, pivot_layers_grid
from specfleet.report.sessions import sessions_note
from specfleet.report.tables import (
    DASH,
    cell_ratio_text,
    grids_for,
    interval_text,
    verdict_marks,
)
from specfleet.stats.ceiling import DecodeCeiling, decode_ceilings
from specfleet.stats.cells import LOOP_SHARE_FLAG, SPREAD_FLAG
from specfleet.stats.interval import RULE, no_verdict_text
from specfleet.stats.runs import target_label
from specfleet.stats.view import PLAIN
from specfleet.store.export import export_runs
from specfleet.userfiles import check_output_file
from specfleet.workers.conditions import CLOCK_FRACTION_FLAG, stored_summary

METHOD = (
    "- Each target runs every model, prompt and repeat with the arms back to back in "
    "rotating order, so load drift hits all arms alike (plan order in the raw data).",
    "- Rate = generated tokens / whole call, prefill included (the reference's headline "
    "figure), after the worker warmed every verify width once (kept apart as warm-up).",
    "- Cell value = median arm tok/s / median plain tok/s on the same target, model and "
    "prompt; spread = (max - min) / median over the repeats; a spread above "
    f"{SPREAD_FLAG:.0%} is flagged.",
    f"- Verdicts, for speed-ups (arm over plain) and changes over time (after over before): "
    f"{RULE}.",
    f"- A cell whose median loop share exceeds {LOOP_SHARE_FLAG} loops (its reply is mostly a "
    "repeated cycle prompt lookup copies for free): marked LOOP, kept out of the headline.",
    "- Counters come from each cell's first repetition; parity compares every repetition's "
    "token ids with plain's first on the same target, and plain's repetitions with each other "
    "(the first repetition that differs: its first differing token and character).",
)


@dataclass(frozen=True)
class RecordFiles:
    markdown: Path
    csv: Path
    plots: tuple[Path, ...]
    missing_glyphs: tuple[str, ...] = ()  # in plot labels, drawn as boxes: no font has them

    def glyphs_note(self) -> str | None:
        """One line naming the label characters no installed font draws, or None: said
        once, not as matplotlib's warning per glyph and draw call."""
        if not self.missing_glyphs:
            return None
        return (f"note: no installed font draws {' '.join(self.missing_glyphs)}: the plots "
                "show boxes for them (the markdown has every name whole)")


def environment_grid(store, runs: list) -> Grid:
    """Every host of the matrix: kind, OS, chip, memory and library versions."""
    names = sorted({r.host for r in runs})
    hosts = {h.name: h for h in store.hosts(names)}
    rows = []
    for name in names:
        host = hosts.get(name)
        versions = next((r.versions for r in runs if r.host == name and r.versions), None)
        versions = versions or (host.versions if host else {}) or {}
        text = ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) or DASH
        if host is None:
            rows.append((name, DASH, DASH, DASH, DASH, text))
            continue
        memory = f"{host.memory_gb:.0f} GB" if host.memory_gb else DASH
        rows.append((name, host.kind or DASH, f"{host.os or DASH} {host.arch or ''}".strip(),
                     host.chip or DASH, memory, text))
    return Grid("Environment", ("host", "kind", "OS", "chip", "memory", "versions"),
                tuple(rows), left_cols=6)


def prompts_grid(store, runs: list) -> Grid:
    """Prompt names, text hashes, prompt token counts and the start of each text."""
    hashes = {r.prompt_name: r.prompt_hash for r in runs}
    texts = store.prompt_texts(sorted(set(hashes.values())))
    rows = []
    for name, digest in hashes.items():
        tokens = sorted({r.prompt_tokens for r in runs if r.prompt_name == name
                         and r.prompt_tokens})
        text = " ".join(texts.get(digest, "").split())
        rows.append((name, digest[:12], "/".join(map(str, tokens)) or DASH,
                     text[:90] + ("…" if len(text) > 90 else "")))
    return Grid("Prompts", ("prompt", "text sha256", "prompt tokens", "text"), tuple(rows),
                left_cols=4)


def load_grid(store, matrix_id: str, runs: list) -> Grid:
    """Load average over the run per host: the worker's samples and each run's readings."""
    samples = store.load_samples(matrix_id=matrix_id)
    rows = []
    for host in sorted({r.host for r in runs}):
        series = [s.load1 for s in samples if s.host == host]
        readings = [r.load_before[0] for r in runs if r.host == host and r.load_before]
        readings += [r.load_after[0] for r in runs if r.host == host and r.load_after]
        mine = [r for r in runs if r.host == host]
        noisy = sum(bool(r.noisy) for r in mine)
        rows.append((host, *_load_cols(series), *_load_cols(readings), f"{noisy} of {len(mine)}"))
    # Each run gives two readings, before and after it: twice as many as runs.
    note = ("Sampled: the worker's periodic readings while the matrix ran; per-run: each run's "
            "reading just before and just after it (two a run).")
    return Grid("Load average over the run (1-minute)",
                ("host", "sampled n", "sampled median", "sampled range", "per-run readings",
                 "per-run median", "per-run range", "runs flagged noisy"), tuple(rows), (note,))


def _load_cols(values: list[float]) -> tuple[str, str, str]:
    if not values:
        return "0", DASH, DASH
    return (str(len(values)), f"{statistics.median(values):.2f}",
            f"{min(values):.2f}–{max(values):.2f}")


def conditions_grid(runs: list, sessions: str | None = None) -> Grid:
    """Host conditions per host: read before its first run and after its last run (power,
    thermal state, clocks, free memory), and the runs flagged throttled with their reasons;
    `sessions` (`sessions_note`) says when the runs span two sessions, between which the
    readings were not taken."""
    rows = []
    for host in sorted({r.host for r in runs}):
        mine = sorted((r for r in runs if r.host == host), key=lambda r: r.started_at or 0)
        first = _reading(mine[0], "before")
        last = _reading(mine[-1], "after")
        flagged = [r for r in mine if r.throttled]
        reasons = "; ".join(dict.fromkeys(r.throttle_reason for r in flagged if r.throttle_reason))
        rows.append((host, first, last, f"{len(flagged)} of {len(mine)}", reasons or DASH))
    note = (f"Throttled: clocks below {CLOCK_FRACTION_FLAG:.0%} of their maximum, thermal state "
            "not nominal, on battery or in Low Power Mode (docs/trust.md); such cells read "
            "THROTTLED.")
    notes = (note,) if sessions is None else (note, sessions)
    return Grid("Host conditions", ("host", "before the first run", "after the last run",
                                    "runs throttled", "why"), tuple(rows), notes, left_cols=5)


def _reading(run, side: str) -> str:
    return stored_summary(run.conditions, side) or DASH


NOT_MEASURED = "not measured"


def ceiling_grid(store, runs: list) -> Grid | None:
    """Plain decode tok/s per host, engine, device and model against the memory-bandwidth
    ceiling (`stats/ceiling.py`); None when the matrix has no plain runs of a real model."""
    hosts = store.hosts(sorted({r.host for r in runs}))
    rows = tuple(_ceiling_row(c) for c in decode_ceilings(
        runs, {h.name: h.read_gb_per_s for h in hosts}))
    if not rows:
        return None
    note = ("Ceiling = the read bandwidth of the memory the target decodes from (the "
            "host's: its worker's probe before its first real run, and again before its "
            "first quiet one, the faster kept; a GPU's own: probed before its first run) / the "
            "weights' bytes as loaded: one plain step reads every weight once, so no plain "
            "decoding on that host can be faster. Share = median decode tok/s (after the "
            "first token) / ceiling; peers that decode plainly (the library's own loop) are "
            "measured against the same ceiling (docs/trust.md).")
    return Grid("Plain decoding against the machine's limit",
                ("host", "engine", "device", "model", "decoder", "runs", "decode tok/s",
                 "weights", "read bandwidth", "ceiling tok/s", "share", "why"),
                rows, (note,), left_cols=5)


def _ceiling_row(c: DecodeCeiling) -> tuple[str, ...]:
    weights = f"{c.weight_bytes / 1e6:.0f} MB" if c.weight_bytes else NOT_MEASURED
    bandwidth = f"{c.read_gb_per_s:.1f} GB/s" if c.read_gb_per_s else NOT_MEASURED
    ceiling = f"{c.ceiling_tok_per_s:.1f}" if c.ceiling_tok_per_s else NOT_MEASURED
    share = f"{c.share:.0%}" if c.share is not None else NOT_MEASURED
    decoder = "plain (ours)" if c.arm == "plain" else f"{c.arm} (peer)"
    return (c.host, c.engine, c.device, c.model, decoder, str(c.runs),
            f"{c.decode_tok_per_s:.2f}",
            weights, bandwidth, ceiling, share, c.why)


def _parity_text(item: ArmParity) -> str:
    if item.verdict == "identical":
        return "identical"
    # A peer's reply is another library's decoding: information, never our divergence.
    differs = PEER_DIFFERS if item.verdict == PEER_DIFFERS else "diverges"
    return f"{differs} at {where_text(item.token, item.char, item.repeat)}"


def parity_grid(store, matrix_id: str) -> list[Grid]:
    """Arm-vs-plain verdicts over every repetition, counted as `specfleet parity ID --no-replay`
    counts them, the plains whose repetitions differ and the planned pairs not compared with
    why (its forensics need a replay on the target)."""
    report = check_parity(store, matrix_id)
    rows = tuple((a.target, a.model, a.prompt, a.arm, _parity_text(a)) for a in report.arms)
    note = "Forensics (competing tokens, logit margins, near-tie or suspect): `specfleet parity ID`."
    # A pair not compared, or a plain that replied two ways, is what `parity` fails: counted
    # as it counts them, and each named.
    notes = ((summary_line(report), note) if report.uncompared or report.plain_differs
             else (note,))
    grids = [Grid("Parity against plain (every repetition against plain's first)",
                  ("target", "model", "prompt", "arm", "verdict"), rows, notes, left_cols=5)]
    grids += [plain_differs_grid(report)] if report.plain_differs else []
    grids += [uncompared_grid(report)] if report.uncompared else []
    return grids + ([cross_grid(report)] if report.cross else [])


def interval_grid(view) -> Grid:
    """Each speed-up's 90% interval beside its verdict: the evidence the tables' `gain`,
    `loss` and `within noise` rest on (`stats/interval.py`)."""
    rows = []
    in_order = (view.cell(t, m, p, a) for t in view.targets for m in view.models
                for p in view.prompts for a in view.lookup_arms)  # the tables' order
    for c in in_order:
        if c is None or c.speedup is None:
            continue
        plain = view.cell(c.target, c.model, c.prompt, PLAIN)
        interval = (interval_text(c.speedup_low, c.speedup_high, c.speedup_coverage)
                    if c.speedup_low is not None and c.speedup_high is not None
                    and c.speedup_coverage is not None else DASH)
        marks = verdict_marks(c)
        if c.no_verdict_n is not None:
            marks = [no_verdict_text(c.no_verdict_n), *marks]
        rows.append((c.target, c.model, c.prompt, c.arm, cell_ratio_text(c), interval,
                     " ".join(marks) or DASH, f"{c.n}/{plain.n if plain else 0}"))
    return Grid("Speed-up intervals", ("target", "model", "prompt", "arm", "speed-up",
                                       "interval", "verdict", "repeats arm/plain"),
                tuple(rows), (f"Verdicts: {RULE}.",), left_cols=4)


def raw_grid(runs: list) -> Grid:
    """Every run: counters, timings, loop share, load."""
    rows = []
    for r in runs:
        load = "/".join(f"{x[0]:.2f}" if x else DASH for x in (r.load_before, r.load_after))
        rows.append((
            target_label(r), r.model, r.prompt_name, r.arm, str(r.repeat),
            str(r.generated_tokens or 0), f"{r.tok_per_s or 0:.2f}",
            f"{decode_tok_per_s(r.generated_tokens or 0, r.decode_s or 0.0):.2f}",
            f"{r.prefill_s or 0:.3f}", f"{r.total_s or 0:.3f}",
            *_counted(r),
            f"{r.loop_share or 0:.2f}", "yes" if r.noisy else "no",
            "yes" if r.throttled else "no", load, r.stop_reason or DASH,
        ))
    headers = ("target", "model", "prompt", "arm", "rep", "tok", "tok/s", "decode tok/s",
               "prefill s",
               "total s", "rounds/drafted/paused", "prop/acc", "shadow", "loop share",
               "noisy", "throttled", "load before/after", "stop")
    return Grid("Raw per-run data (plan order)", headers, tuple(rows), left_cols=5)


def not_done_grid(runs: list) -> Grid | None:
    """Every run not done (failed, interrupted, pending) with its status and its error's
    first line; None when all are done. The tables read done runs alone, so a cell's missing
    repeats are named here, as `matrix show` says on standard error."""
    left = [r for r in runs if r.status != "done"]
    if not left:
        return None
    rows = tuple((target_label(r), r.model, r.prompt_name, r.arm, str(r.repeat), r.status,
                  error_line(r) or DASH) for r in left)
    note = f"{len(left)} of {len(runs)} runs not done: left out of every table above; in `runs.csv`."
    return Grid("Runs not done (plan order)", ("target", "model", "prompt", "arm", "rep",
                                               "status", "error"), rows, (note,), left_cols=7)


def _counted(r) -> tuple[str, str, str]:
    """rounds/drafted/paused, prop/acc and shadow; dashes for a peer arm's run (never counted)."""
    if r.rounds is None:
        return DASH, DASH, DASH
    return (f"{r.rounds}/{r.drafted_rounds or 0}/{r.paused_rounds or 0}",
            f"{r.proposed or 0}/{r.accepted or 0}", str(r.shadow_confirmations or 0))


def _heading_tail(matrix_id: str) -> str:
    return f" (`{matrix_id}`)"  # how a folder's markdown is known for this matrix's record


def _plot_line(name: str) -> str:
    return f"![{name}]({name})"  # how that markdown names each plot of its own


def record_markdown(store, matrix_id: str, plot_names: list[str]) -> str:
    """The whole record as markdown text."""
    matrix = load_matrix(store, matrix_id)
    runs = done_runs(store, matrix_id)
    view = matrix_view(store, matrix, runs)
    finished = (f"finished {matrix.finished_at:%Y-%m-%d %H:%M} UTC" if matrix.finished_at
                else "not finished")
    lines = [
        f"# Benchmark record: {md_text(matrix.name)}{_heading_tail(matrix_id)}", "",
        f"Submitted {matrix.submitted_at:%Y-%m-%d %H:%M} UTC, {finished}; status "
        f"{matrix.status}; specfleet {matrix.specfleet_version}; spec sha256 "
        f"`{matrix.spec_hash[:12]}`; runs by status: {json.dumps(matrix.counts)}.", "",
        "## Method", "", *METHOD, "", "Matrix spec:", "", "```json",
        json.dumps(matrix.spec, indent=2, default=str), "```", "",
    ]
    body = [environment_grid(store, runs), prompts_grid(store, runs)]
    results = grids_for(view)
    if len(view.targets) > 1:  # a row per token limit, as `matrix show --pivot target`
        layers = limit_layers(runs, "whole", matrix_id, matrix.name,
                              stored_plan_order(store, matrix_id))
        results.append(pivot_layers_grid(layers, view.targets, "whole"))
    results.append(interval_grid(view))
    ceiling = ceiling_grid(store, runs)
    tail = [*([ceiling] if ceiling else []), *parity_grid(store, matrix_id),
            load_grid(store, matrix_id, runs), conditions_grid(runs, sessions_note(store, matrix_id))]
    plots = ["## Plots", ""] + [_plot_line(name) for name in plot_names] + [""]
    left = not_done_grid(sorted(store.runs(matrix=matrix_id), key=lambda r: r.plan_order))
    return "\n".join([
        *lines, to_markdown(body, level=2), "## Results", "",
        to_markdown(results), to_markdown(tail, level=2), *plots,
        to_markdown([*([left] if left else []), raw_grid(runs)], level=2),
        "Raw data as CSV: `runs.csv`.", "",
    ])


def _earlier_lines(out: Path, matrix_id: str) -> set[str] | None:
    """The lines of this matrix's earlier markdown in `out`, known by its heading; None when
    `out` holds none."""
    try:
        with (out / f"{matrix_id}.md").open(encoding="utf-8") as handle:
            if not next(handle, "").rstrip().endswith(_heading_tail(matrix_id)):
                return None
            return {line.strip() for line in handle}
    except (OSError, UnicodeDecodeError):
        return None


def _is_own(path: Path, matrix_id: str, earlier: set[str] | None) -> bool:
    """Whether `path` belongs to this matrix's earlier record, whose markdown's lines are
    `earlier`: that markdown itself, a plot it shows, or a `runs.csv` of this matrix's runs."""
    if earlier is None:
        return False
    if path.name == "runs.csv":
        return _csv_matrix(path) in (matrix_id, "")
    return path.suffix == ".md" or _plot_line(path.name) in earlier


def _csv_matrix(path: Path) -> str | None:
    """The matrix whose runs `path` lists ("" for a record's CSV of no runs); None when it is
    no record's CSV."""
    import csv

    try:
        with path.open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            first = next(reader, None)
            columns = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error):
        return None
    if "matrix_id" not in columns:
        return None
    return (first.get("matrix_id") or None) if first else ""


def _refuse_others_files(out: Path, matrix_id: str, finals: list[Path]) -> None:
    """Refuse, before any is written, a folder holding a file the record would replace that is
    not this matrix's own earlier record: another matrix's record (its markdown would show this
    one's plots), or files of the user's own that merely share a name (`runs.csv`, a PNG)."""
    there = [path for path in finals if path.exists()]
    if not there:
        return
    other = _csv_matrix(out / "runs.csv")
    if other and other != matrix_id:
        raise UserError(f"{out}: holds the record of matrix {other!r} (runs.csv, plots of the "
                        "same names); expected an empty folder or this matrix's own, e.g. "
                        f"{out.parent / matrix_id}")  # beside it, as reports/ID
    earlier = _earlier_lines(out, matrix_id)
    stranger = next((path for path in there if not _is_own(path, matrix_id, earlier)), None)
    if stranger is not None:
        raise UserError(f"{stranger}: already there and not part of matrix {matrix_id}'s record, "
                        "which would replace it; expected an empty folder, a new one, or the "
                        "folder of this matrix's own record")


def write_record(store, matrix_id: str, out_dir: str | Path) -> RecordFiles:
    """Write `<id>.md`, `runs.csv` and the PNG plots into `out_dir` (created if needed).

    Every file is written into a staging folder inside `out_dir` first and moved into place
    only once all are whole, so a full disk, a refused write or a Ctrl-C leaves the folder
    as it was (a new `out_dir` is removed again), never a record missing some of its files.

    Raises:
        UserError: an unknown matrix id, a file that cannot be written, or one in `out_dir`
            the record would replace that is not this matrix's own earlier record.
    """
    matrix = load_matrix(store, matrix_id)
    out = Path(out_dir)
    view = matrix_view(store, matrix, done_runs(store, matrix_id))
    markdown, csv_path = out / f"{matrix_id}.md", out / "runs.csv"
    finals = [markdown, csv_path, *plot_files(view, out)]
    for path in finals:  # before any is written
        check_output_file(path)
    _refuse_others_files(out, matrix_id, finals)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{matrix_id}.partial-", dir=out))
    try:
        plots = write_plots(view, staging)
        # UTF-8 whatever the locale: an ASCII or Latin-1 one cannot hold the tables' – and ≠.
        (staging / markdown.name).write_text(
            record_markdown(store, matrix_id, [p.name for p in plots.paths]), encoding="utf-8")
        export_runs(store.runs(matrix=matrix_id), "csv", staging / csv_path.name)
        for path in finals:
            os.replace(staging / path.name, path)
    except OSError as err:
        raise UserError(f"{out}: cannot write the record ({err.strerror or err}); expected a "
                        "folder you can write with room for it") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if created and not any(out.iterdir()):
            out.rmdir()
    return RecordFiles(markdown, csv_path, tuple(finals[2:]), plots.missing_glyphs)
