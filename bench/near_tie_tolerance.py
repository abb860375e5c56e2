"""Replay `calibrated` under other near-tie tolerances (`calibrated.NEAR_TIE`, shipped 0.05
since its revision 3; 0 is revision 2's rule, the best score's draft): the shortest draft
whose score is within TOL steps of the best (a wide block after a shadow probe confirms a
fresh match can win by a hair and lose all of it on a miss). Over the replies of
bench/occurrence_support.py, the seven tables of bench/policies_oracle.py (its `replayed`):

    .venv/bin/python bench/near_tie_tolerance.py /tmp/replies.json 0,0.05,0.1,0.2,0.4

Each row: per set (tuning copy | tuning prose | held-out copy | held-out prose) the mean
efficiency, the worst speed-up over plain in brackets, and the geometric-mean speed-up.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import specfleet.engine.calibrated as cal  # noqa: E402
from bench.cli_args import BenchParser, numbers_at_least_zero, run_main  # noqa: E402
from bench.occurrence_support import replayed, set_cells  # noqa: E402

SHIPPED = cal.NEAR_TIE


def main() -> None:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument("replies", type=Path,
                        help="JSON file of replies (bench/occurrence_support.py --generate)")
    parser.add_argument("tolerances", type=numbers_at_least_zero,
                        help="comma list of tolerances in steps, each >= 0; the shipped one "
                             "is always the first row")
    args = parser.parse_args()
    if not args.replies.is_file():
        parser.error(f"argument replies: no file {args.replies}; expected the JSON file "
                     "bench/occurrence_support.py --generate writes")
    replies = json.loads(args.replies.read_text())
    for tol in [None, *args.tolerances]:
        cal.NEAR_TIE = SHIPPED if tol is None else tol
        try:
            result = replayed(replies)
        finally:
            cal.NEAR_TIE = SHIPPED
        cells = set_cells(replies, result, geomean=True)
        print(f"| {'shipped' if tol is None else tol} | {' | '.join(cells)} |", flush=True)


if __name__ == "__main__":
    run_main(main)
