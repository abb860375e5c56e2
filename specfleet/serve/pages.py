"""What each page shows, read from the store through the same functions the terminal uses.

Every number comes from `specfleet.stats` (`view_of_runs`) and `report/` (`grids_for`,
`cell_history`, `compare`, `check_parity`, which read `specfleet.stats` too): the web view has
no statistics of its own. Each function returns the template's context, or with `as_json`
the body of the page's `/api/...` twin.
"""

from __future__ import annotations

import functools
import io
import json
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, replace
from statistics import median
from urllib.parse import quote_plus, urlencode

import yaml

from specfleet.report.build import done_runs, matrix_view
from specfleet.report.coverage import compare_coverage
from specfleet.report.history import (
    cell_history,
    compare,
    compare_grid,
    history_grid,
    render_compare,
    render_history,
    same_matrix,
    unstored_host_problem,
)
from specfleet.report.parity import check_parity
from specfleet.report.parity_tables import arm_grid, cross_grid, summary_line, uncompared_grid
from specfleet.report.tables import grids_for, view_body
from specfleet.serve import svg
from specfleet.serve.params import BadParameter, NotFound
from specfleet.stats.runs import CELL_FIELDS, ROW_FIELDS
from specfleet.store.export import export_runs, with_job_prompts

MATRICES_PER_PAGE = 50
RUNS_PER_PAGE = 100
HISTORY_LAST = 50  # newest matrices a history page shows unless ?last= says otherwise
# What a history page's refusal calls a filter `check_stored_values` would name by its flag.
QUERY_NAMES = {"model": "query parameter model", "prompt": "query parameter prompt",
               "host": "query parameter target's HOST"}
PROGRESS_STATUSES = ("done", "running", "pending", "failed", "interrupted")
# What `conditions_by_host` reads of a run besides its cell.
CONDITIONS_FIELDS = ("host", "conditions", "finished_at", "plan_order", "throttled",
                     "throttle_reason")


def history_href(model: str, prompt: str, arm: str, target: str | None = None) -> str:
    # What urlencode writes, each value quoted once per process (a matrix page links 400 cells).
    query = f"model={_quoted(model)}&prompt={_quoted(prompt)}&arm={_quoted(arm)}"
    if target and target.count("/") > 2:  # a stored host with a '/' reads as no target: show
        target = None  # the cell on every target, not a 400
    return "/history?" + query + (f"&target={_quoted(target)}" if target else "")


@functools.lru_cache(maxsize=4096)
def _quoted(value: str) -> str:
    return quote_plus(value)


def progress(matrix) -> dict:
    """A matrix's (or a generation job's) status and run counts per status (what the live
    updates poll)."""
    counts = {s: matrix.counts.get(s, 0) for s in PROGRESS_STATUSES}
    return {"id": matrix.id, "status": matrix.status, "total": matrix.total_runs, **counts,
            "finished_at": time_text(matrix.finished_at)}


def time_text(moment) -> str | None:
    """A stored time as the pages show it (UTC, to the second), None for none."""
    return None if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def last_page(page: int, total: int, per_page: int, what: str) -> int:
    """How many pages `total` rows fill (at least 1).

    Raises:
        NotFound: `page` is past the last one (the line names it).
    """
    pages = max(1, -(-total // per_page))
    if page > pages:
        raise NotFound(f"page {page} is past the last page of the {what}; expected a page "
                       f"from 1 to {pages}")
    return pages


def matrices_page(store, page: int = 1, name: str | None = None,
                  as_json: bool = False) -> dict:
    """Every matrix (with `name`: those whose name holds it, case-insensitively), newest
    first, a page at a time."""
    total = store.count_matrices(name_contains=name)
    what = "matrices" if name is None else f"matrices named like {name[:80]!r}"
    pages = last_page(page, total, MATRICES_PER_PAGE, what)
    rows = store.list_matrices(limit=MATRICES_PER_PAGE, offset=(page - 1) * MATRICES_PER_PAGE,
                               name_contains=name)
    items = [{**progress(m), "name": m.name, "submitted_at": time_text(m.submitted_at)}
             for m in rows]
    listed = {"matrices": items, "page": page, "pages": pages, "total": total, "name": name}
    if as_json:
        return listed
    # The pager's links keep the filter.
    kept = "&" + urlencode({"name": name}) if name is not None else ""
    return {**listed, "compare_pair": compare_pair(items), "kept_query": kept}


def compare_pair(matrices: list[dict]) -> tuple[str, str]:
    """The compare form's defaults (baseline, newer): the newest matrix that has an older one
    of its name, and that one (the two newest are often two different matrices, a `bench`
    between two `demo` runs); else the two newest."""
    for i, newer in enumerate(matrices):
        older = next((m for m in matrices[i + 1:] if m["name"] == newer["name"]), None)
        if older is not None:
            return older["id"], newer["id"]
    ids = [m["id"] for m in matrices[:2]]
    return (ids[1] if len(ids) > 1 else "", ids[0] if ids else "")


def jobs_page(store, page: int = 1, as_json: bool = False) -> dict:
    """Every generation job (`specfleet job generate`), newest first, a page at a time."""
    total = store.count_generation_jobs()
    pages = last_page(page, total, MATRICES_PER_PAGE, "generation jobs")
    rows = store.list_generation_jobs(limit=MATRICES_PER_PAGE,
                                      offset=(page - 1) * MATRICES_PER_PAGE)
    return {"jobs": [_job_record(j) for j in rows], "page": page, "pages": pages,
            "total": total}


def job_page(store, job_id: str, page: int = 1, as_json: bool = False) -> dict:
    """A generation job and its replies in the batch's order, a page at a time."""
    job = store.get_generation_job(job_id)
    total = store.count_runs(job=job_id)
    pages = last_page(page, total, RUNS_PER_PAGE, f"replies of {job_id}")
    shown = store.runs(job=job_id, limit=RUNS_PER_PAGE, offset=(page - 1) * RUNS_PER_PAGE)
    return {"job": {**_job_record(job), "params": job.params},
            "runs": results_records(with_job_prompts(store, shown)) if as_json else shown,
            "page": page,
            "pages": pages, "total": total}


def _job_record(job) -> dict:
    return {**progress(job), "name": job.name, "target": f"{job.host}/{job.engine}/{job.device}",
            "model": job.model, "submitted_at": time_text(job.submitted_at)}


@dataclass(frozen=True)
class HostLoad:
    host: str
    samples: int
    median_load1: float
    max_load1: float
    max_cpu_util: float | None


def load_by_host(store, matrix_id: str) -> list[HostLoad]:
    """The load samples taken while the matrix ran, summarised per host."""
    by_host = defaultdict(list)
    for sample in store.load_samples(matrix_id=matrix_id):
        by_host[sample.host].append(sample)
    out = []
    for host, samples in sorted(by_host.items()):
        loads = [s.load1 for s in samples]
        cpu = [s.cpu_util for s in samples if s.cpu_util is not None]
        out.append(HostLoad(host, len(samples), median(loads), max(loads),
                            max(cpu) if cpu else None))
    return out


@dataclass(frozen=True)
class HostConditionsSummary:
    host: str
    runs: int
    throttled: int
    reasons: tuple[str, ...]
    first: str  # the first run's reading before it started
    last: str  # the last run's reading after it ended


def conditions_by_host(runs) -> list[HostConditionsSummary]:
    """Per host: how many runs were throttled and why, and its conditions at the start and
    the end of the matrix (`workers/conditions` readings stored with every run)."""
    from specfleet.workers.conditions import stored_summary

    by_host = defaultdict(list)
    for run in runs:
        if run.conditions:
            by_host[run.host].append(run)
    out = []
    for host, group in sorted(by_host.items()):
        group.sort(key=lambda r: (r.finished_at is None, r.finished_at, r.plan_order))
        out.append(HostConditionsSummary(
            host, len(group), sum(bool(r.throttled) for r in group),
            tuple(dict.fromkeys(r.throttle_reason for r in group if r.throttle_reason)),
            stored_summary(group[0].conditions, "before") or "–",
            stored_summary(group[-1].conditions, "after") or "–",
        ))
    return out


def matrix_page(store, matrix_id: str, as_json: bool = False) -> dict:
    """Heatmaps, the terminal's tables, load, host conditions and spec of one matrix (JSON:
    exactly `matrix show --format json`, plus its progress)."""
    matrix = store.get_matrix(matrix_id)
    runs = done_runs(store, matrix_id, (*ROW_FIELDS, *CONDITIONS_FIELDS))
    view = matrix_view(store, matrix, runs)  # what `matrix show` prints
    if as_json:
        return {**view_body(view), "progress": progress(matrix)}
    grids = grids_for(view)

    def href(cell):
        return history_href(cell.model, cell.prompt, cell.arm, cell.target)

    speedup_notes = [g.notes for g in grids if g.title.startswith("Prompt lookup")]
    return {
        "matrix": matrix, "progress": progress(matrix), "view": view,
        "heatmaps": [svg.heatmap(_prompts_of(view, t), t, href) for t in view.targets],
        "speedup_notes": speedup_notes,
        "tables": [g for g in grids if not g.title.startswith("Prompt lookup")],
        "loads": load_by_host(store, matrix_id), "conditions": conditions_by_host(runs),
        "spec_yaml": spec_yaml(matrix.spec),
    }


def _prompts_of(view, target: str):
    """`view` with only the prompts `target` ran: a prompt kept to other engines (the demo's
    edit_fn on MLX) is no empty column on that target's heatmap."""
    ran = {c.prompt for c in view.cells if c.target == target and c.rates}
    return replace(view, prompts=tuple(p for p in view.prompts if p in ran))


def parity_page(store, matrix_id: str, as_json: bool = False) -> dict:
    """`specfleet parity`'s verdicts without replays: each arm against plain (first
    divergence token and character), the planned pairs not compared, and plain across
    targets (JSON: `specfleet parity --no-replay --format json`'s body, its summary line
    included)."""
    matrix = store.get_matrix(matrix_id)
    report = check_parity(store, matrix_id)
    if as_json:
        return {**asdict(report), "summary": summary_line(report)}
    grids = ([arm_grid(report)] + ([uncompared_grid(report)] if report.uncompared else [])
             + ([cross_grid(report)] if report.cross else []))
    return {"matrix": matrix, "grids": grids}


def spec_yaml(spec: dict) -> str:
    """The matrix spec as submitted, as YAML."""
    return yaml.safe_dump(spec, sort_keys=False, allow_unicode=True, width=1_000_000)


def runs_page(store, matrix_id: str, page: int = 1, as_json: bool = False) -> dict:
    """The runs of a matrix in plan order, a page at a time: status, tok/s, load, output."""
    matrix = store.get_matrix(matrix_id)
    total = store.count_runs(matrix=matrix_id)
    pages = last_page(page, total, RUNS_PER_PAGE, f"runs of {matrix_id}")
    shown = store.runs(matrix=matrix_id, limit=RUNS_PER_PAGE, offset=(page - 1) * RUNS_PER_PAGE)
    if as_json:
        return {"matrix_id": matrix_id, "page": page, "pages": pages, "total": total,
                "runs": results_records(shown)}
    return {"matrix": matrix, "runs": shown, "page": page, "pages": pages, "total": total}


def results_records(runs) -> list[dict]:
    """The runs as `specfleet results -o json` writes them (the same field names and values),
    so a script reads the web API and the CLI with one vocabulary."""
    out = io.StringIO()
    export_runs(runs, "json", out)
    return json.loads(out.getvalue())


def history_page(store, model: str, prompt: str, arm: str, target: str | None = None,
                 last: int | None = HISTORY_LAST, as_json: bool = False) -> dict:
    """One cell over time (the newest `last` matrices, None: all): per target a tok/s plot
    and a speed-up plot, and the table."""
    if target and (problem := unstored_host_problem(store, target.split("/")[0])):
        raise BadParameter(f"query parameter target={target[:80]!r}: HOST: {problem}")
    rows = cell_history(store, model, prompt, arm, target, last=last, flags=QUERY_NAMES)
    title = f"History of {model} / {prompt} / {arm}" + (f" on {target}" if target else "")
    if as_json:
        return {"title": title, "last": last,
                "points": json.loads(render_history(rows, title, "json"))}
    by_series = defaultdict(list)  # a target, token limit and temperature: the table's series
    for row in rows:
        by_series[(row.target, row.max_tokens, row.temperature)].append(row)
    limits = Counter(label for label, _, _ in by_series)  # named where a target has two
    named = {key: _series_name(*key) if limits[key[0]] > 1 else key[0] for key in by_series}
    plots = [(named[key], svg.history_plot(r, series=named[key]),
              svg.history_plot(r, speedup=True, series=named[key]))
             for key, r in by_series.items()]
    query = {"model": model, "prompt": prompt, "arm": arm, **({"target": target} if target else {})}
    return {"title": title, "plots": plots, "table": history_grid(rows, title), "rows": rows,
            "last": last, "all_href": "/history?" + urlencode({**query, "last": "all"})}


def _series_name(target: str, limit: int | None, temperature: float) -> str:
    """`mac1/mlx/metal, 256 new tokens` (`, sampled at T0.8` where it was)."""
    sampled = f", sampled at T{temperature:g}" if temperature else ""
    return f"{target}, {limit} new tokens{sampled}"


def compare_page(store, a: str, b: str, allow_mixed: bool = False,
                 as_json: bool = False) -> dict:
    """Two matrices cell by cell: the `compare` table, regressions highlighted."""
    refusal = same_matrix(a, b, names="a and b")  # the query parameters' names
    if refusal:
        raise BadParameter(refusal)
    rows = compare(store, a, b, allow_mixed)
    # As `specfleet compare`: nothing in common is no evidence, never "0 regressions".
    coverage = compare_coverage(store.runs(matrix=a, columns=CELL_FIELDS),
                                store.runs(matrix=b, columns=CELL_FIELDS), len(rows))
    counts = coverage.counts()
    if as_json:
        return {"a": a, "b": b, "allow_mixed": allow_mixed, "coverage": counts,
                "cells": json.loads(render_compare(rows, a, b, "json"))}
    return {"table": compare_grid(rows, a, b), "rows": rows, "a": a, "b": b,
            "allow_mixed": allow_mixed, "coverage": coverage.text(), **counts,
            "regressions": sum(r.verdict == "regression" for r in rows)}
