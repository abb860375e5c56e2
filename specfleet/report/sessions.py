"""The sessions of a matrix: the drivers that timed its done runs. A `run` cut short and then
resumed mixes two, whose host load and conditions may differ; the tables, the record and
`run` / `resume` say so."""

from __future__ import annotations

from collections import defaultdict

from specfleet.jobs.resolve import counted


def sessions_note(store, matrix_id: str) -> str | None:
    """Under the tables of a matrix whose done runs were timed by more than one driver (a
    `run` cut short, then `resume`), on stderr: its cells mix runs of those sessions, whose
    host load and conditions may differ; each session's runs and times named. A run keeps
    the driver that timed it (`runs.driver_id`); runs stored without one count as one."""
    rows = store.runs(matrix=matrix_id, status="done",
                      columns=("driver_id", "started_at", "finished_at"))
    sessions: dict[str | None, list] = defaultdict(list)
    for row in rows:
        sessions[row.driver_id].append(row)
    if len(sessions) < 2:
        return None
    spans = sorted((_session_span(runs) for runs in sessions.values()), key=lambda s: s[0])
    return (f"matrix {matrix_id}: its cells mix runs timed in {len(spans)} sessions "
            f"({', '.join(text for _, text in spans)}); the host's load and conditions may "
            "differ between them")


def _session_span(runs: list) -> tuple[str, str]:
    """(sort key, `3 runs 2026-12-07 08:54:59–08:55:03 UTC`) of one session's runs."""
    starts = [r.started_at for r in runs if r.started_at is not None]
    ends = [r.finished_at for r in runs if r.finished_at is not None]
    if not starts or not ends:
        return "", f"{counted(len(runs), 'run')} at times not stored"
    first, last = min(starts), max(ends)
    until = f"{last:%H:%M:%S}" if last.date() == first.date() else f"{last:%Y-%m-%d %H:%M:%S}"
    return first.isoformat(), f"{counted(len(runs), 'run')} {first:%Y-%m-%d %H:%M:%S}–{until} UTC"
