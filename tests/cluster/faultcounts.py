"""Run counts of a fault test: expected / done / interrupted / run twice / stored twice.

`run twice` counts executions beyond one per run key (the toy engine logs every finished
execution to `SPECFLEET_TOY_RUN_LOG`), allowing one more for each run that was in flight
when its driver died (its reply had nowhere to go: resume runs it again, or claims the
result its worker kept on the host).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, select

from specfleet.store import open_store
from specfleet.store.tables import Run


@dataclass(frozen=True)
class FaultCounts:
    expected: int
    done: int
    interrupted: int
    run_twice: int
    stored_twice: int
    orphaned: int = 0

    def line(self, name: str) -> str:
        return (f"FAULT COUNTS {name}: expected {self.expected} / done {self.done} / "
                f"interrupted {self.interrupted} / run twice {self.run_twice} / stored twice "
                f"{self.stored_twice} (re-run after the driver died mid-run: {self.orphaned})")


def fault_counts(url: str, matrix_id: str, run_log: Path,
                 orphaned: Collection[str] = ()) -> FaultCounts:
    """Counts for one matrix, read from the store and the toy engine's execution log.

    `orphaned`: the run keys a dead driver had in flight. Each may run once more on resume
    (its reply was lost) or not (resume claimed the result its worker kept): one extra
    execution of each is allowed, not counted as run twice."""
    with open_store(url) as store:
        matrix = store.get_matrix(matrix_id)
        keys = {r.run_key for r in store.runs(matrix=matrix_id)}
        with store.engine.connect() as conn:
            stored_twice = conn.execute(
                select(func.count()).select_from(
                    select(Run.run_key).where(Run.matrix_id == matrix_id)
                    .group_by(Run.run_key).having(func.count() > 1).subquery())
            ).scalar_one()
    executed = Counter(k for k in run_log.read_text().split() if k in keys) \
        if run_log.exists() else Counter()
    extra = sum(n - 1 - (key in orphaned) for key, n in executed.items() if n > 1)
    return FaultCounts(
        expected=matrix.total_runs, done=matrix.counts.get("done", 0),
        interrupted=matrix.counts.get("interrupted", 0), run_twice=extra,
        stored_twice=stored_twice, orphaned=len(orphaned),
    )
