"""Replay `calibrated` with a near-tie tolerance: the shortest draft whose score is within
TOL steps of the best, instead of the best (a wide block after a shadow probe confirms a
fresh match can win by a hair and lose all of it on a miss). Over the replies of
bench/occurrence_support.py, the seven tables of bench/policies_oracle.py (its `replayed`):

    .venv/bin/python bench/near_tie_tolerance.py /tmp/replies.json 0,0.05,0.1,0.2,0.4

Each row: per set (tuning copy | tuning prose | held-out copy | held-out prose) the mean
efficiency, the worst speed-up over plain in brackets, and the geometric-mean speed-up.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import specfleet.engine.calibrated as cal  # noqa: E402
from bench.occurrence_support import replayed, set_cells  # noqa: E402

SHIPPED = cal.saving_draft


def tolerant(tol: float) -> Callable[..., int]:
    """`cal.saving_draft` that takes the shortest draft scoring within `tol` of the best."""

    def saving_draft(alive: Sequence[float], costs: Sequence[float], refeeds: bool = False) -> int:
        scores, landed = [], 0.0
        for k in range(1, len(alive) + 1):
            landed += alive[k - 1]
            cost = cal.width_cost(costs, k + 1)
            if refeeds:
                cost += cal.expected_refeed_cost(alive[:k], costs)
            scores.append(1.0 + landed - cost
                          - cal.LOSS_WEIGHT * cal.expected_loss(alive[:k], cost))
        floor = cal.PLAIN_STEP_SAVING + 1e-12
        best = max(scores, default=0.0)
        if best <= floor:
            return 0
        return next(k for k, s in enumerate(scores, 1) if s > floor and s >= best - tol)

    return saving_draft


def main() -> None:
    replies = json.loads(Path(sys.argv[1]).read_text())
    for tol in [None, *(float(x) for x in sys.argv[2].split(","))]:
        cal.saving_draft = SHIPPED if tol is None else tolerant(tol)
        try:
            result = replayed(replies)
        finally:
            cal.saving_draft = SHIPPED
        cells = set_cells(replies, result, geomean=True)
        print(f"| {'shipped' if tol is None else tol} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    main()
