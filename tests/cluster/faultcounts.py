"""Run counts of a fault test: expected / done / interrupted / run twice / stored twice.

`run twice` counts executions beyond one per run key (the toy engine logs every finished
execution to `SPECFLEET_TOY_RUN_LOG`), less the runs that were in flight when their driver
died (their result had nowhere to go; resume runs them again by design).
"""

from __future__ import annotations

from collections import Counter
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


def fault_counts(url: str, matrix_id: str, run_log: Path, orphaned: int = 0) -> FaultCounts:
    """Counts for one matrix, read from the store and the toy engine's execution log."""
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
    extra = sum(n - 1 for n in executed.values() if n > 1)
    return FaultCounts(
        expected=matrix.total_runs, done=matrix.counts.get("done", 0),
        interrupted=matrix.counts.get("interrupted", 0), run_twice=extra - orphaned,
        stored_twice=stored_twice, orphaned=orphaned,
    )
