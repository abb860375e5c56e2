"""The invariants a chaos run (tools/chaos.py) checks, read from the store, the toy engine's
execution log, the hosts' result journals and the commands' exit codes.

Each check returns a `Check`: its name, what it counted, and the violations (empty: it holds).
`query(sql, *args)` runs one SQL statement on the store and returns its rows.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from specfleet.store.leases import reads_interrupted
from specfleet.store.values import naive_utc

Query = Callable[..., list[tuple]]
FINAL_MATRIX = ("done", "interrupted")


@dataclass
class Check:
    """One invariant's outcome: counts for the record, violations for the exit code."""

    name: str
    counts: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations

    def line(self) -> str:
        said = ", ".join(f"{k} {v}" for k, v in self.counts.items())
        head = f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {said}"
        return "\n".join([head, *(f"       - {v}" for v in self.violations[:10])])


@dataclass
class Ended:
    """A driver command that ended: what it returned and the store when it returned."""

    label: str  # e.g. "run h1 chaos-7-3"
    code: int
    killed: bool  # SIGKILLed by the schedule
    stdout: str
    stderr: str
    matrix_id: str | None
    counts: dict[str, int] | None  # the matrix's run counts when it ended (None: store down)
    total: int
    during_outage: bool  # its life overlapped a store outage


def _in(ids: Iterable[str]) -> tuple[str, tuple]:
    ids = tuple(ids) or ("",)
    return ",".join(["%s"] * len(ids)), ids


def planned_runs(query: Query, matrices: list[str]) -> Check:
    """Every planned run is done, or failed/interrupted with a reason; none `running` or
    `pending` in a matrix that says it is done."""
    marks, ids = _in(matrices)
    now = naive_utc(datetime.now().astimezone())
    rows = query(f"SELECT r.run_key, r.status, r.error, r.lease_until, m.status, m.lease_until "
                 f"FROM runs r JOIN matrices m ON m.id = r.matrix_id WHERE r.matrix_id IN "
                 f"({marks})", *ids)
    check = Check("every planned run done once or reported with a reason")
    seen: Counter = Counter()
    for key, status, error, lease, m_status, m_lease in rows:
        shown = "interrupted" if reads_interrupted(status, lease, now) else status
        matrix = "interrupted" if reads_interrupted(m_status, m_lease, now) else m_status
        seen[shown] += 1
        if shown == "running":
            check.violations.append(f"{key}: still running (lease live) after the settle")
        elif shown in ("failed", "interrupted") and status != "running" and not error:
            check.violations.append(f"{key}: {shown} with no reason")
        elif shown == "pending" and matrix != "interrupted":
            check.violations.append(f"{key}: pending in a matrix that reads {matrix}")
    check.counts = {"planned": len(rows), **dict(sorted(seen.items()))}
    return check


def stored_once(query: Query, matrices: list[str], history: dict[str, tuple]) -> Check:
    """No run key stored twice, and no done run's stored result replaced later (`history`:
    run key -> (finished_at, result_hash) as first seen done, updated at each checkpoint)."""
    marks, ids = _in(matrices)
    twice = query(f"SELECT run_key, count(*) FROM runs WHERE matrix_id IN ({marks}) "
                  f"GROUP BY run_key HAVING count(*) > 1", *ids)
    check = Check("no run stored twice")
    check.violations += [f"{key}: {n} rows" for key, n in twice]
    replaced = note_done(query, matrices, history)
    check.violations += [f"{key}: its stored result was replaced" for key in replaced]
    check.counts = {"done runs watched": len(history), "rows twice": len(twice),
                    "results replaced": len(replaced)}
    return check


def note_done(query: Query, matrices: list[str], history: dict[str, tuple]) -> list[str]:
    """Record newly done runs in `history`; return the keys whose stored result changed."""
    marks, ids = _in(matrices)
    rows = query(f"SELECT run_key, finished_at, result_hash FROM runs WHERE matrix_id IN "
                 f"({marks}) AND status = 'done'", *ids)
    changed = []
    for key, finished, digest in rows:
        if key in history and history[key] != (finished, digest):
            changed.append(key)
        history.setdefault(key, (finished, digest))
    return changed


def no_overlap(query: Query, matrices: list[str]) -> Check:
    """No two timed runs overlap on one physical machine (stored start/finish, by the
    machine id each host reported)."""
    marks, ids = _in(matrices)
    rows = query(f"SELECT r.run_key, r.host, coalesce(h.machine_id, r.host), r.started_at, "
                 f"r.finished_at FROM runs r LEFT JOIN hosts h ON h.name = r.host WHERE "
                 f"r.matrix_id IN ({marks}) AND r.status IN ('done', 'failed') AND "
                 f"r.started_at IS NOT NULL AND r.finished_at IS NOT NULL", *ids)
    by_machine: dict[str, list] = defaultdict(list)
    for key, host, machine, start, end in rows:
        by_machine[machine].append((start, end, key, host))
    check = Check("no two timed runs overlap on one machine")
    pairs = 0
    for runs in by_machine.values():
        runs.sort()
        latest = runs[0]  # the run that ends last of those started so far
        for run in runs[1:]:
            pairs += 1
            if run[0] < latest[1]:
                check.violations.append(f"{latest[3]} {latest[2]} ends {latest[1]:%H:%M:%S.%f} "
                                        f"after {run[3]} {run[2]} starts {run[0]:%H:%M:%S.%f}")
            latest = max(latest, run, key=lambda r: r[1])
    check.counts = {"timed runs": len(rows), "machines": len(by_machine),
                    "pairs in order": pairs, "overlapping": len(check.violations)}
    return check


def nothing_lost(query: Query, matrices: list[str], run_log: Path,
                 journals: list[Path]) -> Check:
    """Every run a worker finished (the toy engine logs each finished execution) is stored
    done, and no host's journal still holds a result the store lacks."""
    marks, ids = _in(matrices)
    status = dict(query(f"SELECT run_key, status FROM runs WHERE matrix_id IN ({marks})", *ids))
    executed = Counter(k for k in run_log.read_text().split() if k in status) \
        if run_log.exists() else Counter()
    check = Check("no finished result lost")
    check.violations += [f"{key}: finished on its worker, stored {status[key]}"
                         for key in executed if status[key] != "done"]
    left = [p for folder in journals if folder.exists() for p in folder.rglob("*.json")]
    for path in left:
        key = json.loads(path.read_text()).get("run_key")
        if status.get(key) != "done":
            check.violations.append(f"{key}: journaled in {path.parent.name}, stored "
                                    f"{status.get(key)}")
    refused = [p for folder in journals if folder.exists() for p in folder.rglob("*.conflict")]
    check.violations += [f"{p.parent.name}/{p.name}: a journaled result the store refused "
                         f"(it holds another result of that run)" for p in refused]
    check.counts = {"executions": sum(executed.values()), "run keys executed": len(executed),
                    "executed more than once": sum(n > 1 for n in executed.values()),
                    "journal files left": len(left), "journal conflicts": len(refused)}
    return check


def greedy_identical(query: Query, matrices: list[str]) -> Check:
    """Greedy replies of one cell (model, prompt, max tokens; every arm) are identical across
    the hosts of one engine and device."""
    marks, ids = _in(matrices)
    rows = query(f"SELECT matrix_id, model, prompt_hash, max_tokens, engine, device, host, "
                 f"token_ids FROM runs WHERE matrix_id IN ({marks}) AND status = 'done' AND "
                 f"temperature = 0", *ids)
    replies: dict[tuple, dict[str, set]] = defaultdict(lambda: defaultdict(set))
    for *cell, host, tokens in rows:
        replies[tuple(cell)][json.dumps(tokens)].add(host)
    check = Check("greedy replies of a cell identical across hosts")
    for cell, seen in replies.items():
        if len(seen) > 1:
            check.violations.append(f"{cell[0]} {cell[1]} {cell[4]}/{cell[5]}: {len(seen)} "
                                    f"different replies ({[sorted(h) for h in seen.values()]})")
    hosts = {h for seen in replies.values() for group in seen.values() for h in group}
    check.counts = {"cells": len(replies), "replies": len(rows), "hosts": len(hosts)}
    return check


def matrices_final(query: Query, matrices: list[str]) -> Check:
    """Every matrix ends `done` or `interrupted` (as the CLI reads it), never `running`."""
    marks, ids = _in(matrices)
    now = naive_utc(datetime.now().astimezone())
    rows = query(f"SELECT id, status, lease_until FROM matrices WHERE id IN ({marks})", *ids)
    check = Check("every matrix ends done or interrupted")
    seen: Counter = Counter()
    for ident, status, lease in rows:
        shown = "interrupted" if reads_interrupted(status, lease, now) else status
        seen[shown] += 1
        if shown not in FINAL_MATRIX:
            check.violations.append(f"{ident}: {shown}")
    check.counts = {"matrices": len(rows), **dict(sorted(seen.items()))}
    return check


def exit_codes(ended: list[Ended]) -> Check:
    """Each command's exit code says what happened: 0 = its matrix all done; 1 = not all done
    (or a live driver still runs it); 2 = the store stayed unreachable (an outage overlapped
    it); SIGKILL only where the schedule killed it; never a traceback."""
    check = Check("exit codes match what happened")
    seen: Counter = Counter()
    for cmd in ended:
        seen["killed" if cmd.killed else f"exit {cmd.code}"] += 1
        why = _wrong_exit(cmd)
        if why:
            check.violations.append(f"{cmd.label}: exit {cmd.code}: {why}")
    check.counts = {"commands": len(ended), **dict(sorted(seen.items()))}
    return check


def _wrong_exit(cmd: Ended) -> str | None:
    if "Traceback" in cmd.stderr or "Traceback" in cmd.stdout:
        return "a traceback: " + cmd.stderr[cmd.stderr.find("Traceback"):][:300]
    if cmd.killed:
        return None
    all_done = cmd.counts is not None and cmd.counts.get("done", 0) == cmd.total > 0
    if cmd.code == 0:
        return None if all_done or cmd.counts is None else f"but the store said {cmd.counts}"
    if cmd.code == 1:
        if "still runs it" in cmd.stdout:
            return None if "took 0 runs" in cmd.stdout else "refused but took runs"
        return None if not all_done else f"but every run was done ({cmd.counts})"
    if cmd.code == 2 and cmd.during_outage and ("store" in cmd.stderr
                                                 or "cannot reach PostgreSQL" in cmd.stderr):
        return None
    return "unexpected: " + (cmd.stderr or cmd.stdout).strip()[-300:]
