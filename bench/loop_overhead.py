"""Host time per round of the engine loop, with a runner that costs (almost) nothing.

Three arms on a 2,000-token reply: plain decoding (every round a pipelined one-token step),
prompt lookup where every drafted round verifies 7 proposals that all land, and `calibrated`
under a table where a verify costs its width (MLX's quantized CPU kernels): it drafts nothing,
and every round is a pipelined step plus the policy's rule and a shadow-probe lookup. Prints
the median microseconds per round (decode time / rounds, prefill excluded) over several
repeats, the spread beside it, and the targets (<= 50 us plain and paused, <= 100 us drafted).

Usage: .venv/bin/python bench/loop_overhead.py [--tokens 2000] [--repeats 15]
"""

from __future__ import annotations

import platform
import statistics
import sys
from pathlib import Path

from specfleet.engine.config import PromptLookupConfig
from specfleet.engine.loop import generate
from specfleet.engine.runners.toy import ZeroCostRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `bench.cli_args` from a checkout
from bench.cli_args import BenchParser, positive_int, run_main  # noqa: E402

TARGET_US = {"plain": 50.0, "drafted": 100.0, "paused": 50.0}
# A verify of width w costs w steps: no draft can pay, so calibrated never drafts.
WIDTH_PRICED = tuple(float(w) for w in range(1, 34))
BLOCK = list(range(1, 601))  # 600 distinct tokens: every n-gram has one earlier occurrence


def measure(arm: str, tokens: int) -> tuple[float, int, int]:
    """One generation; returns (us per round, rounds, accepted)."""
    runner = ZeroCostRunner(BLOCK * (2 + tokens // len(BLOCK)))
    lookup = {"plain": None, "drafted": PromptLookupConfig(),
              "paused": PromptLookupConfig(max_draft=32, policy="calibrated",
                                           costs=WIDTH_PRICED)}[arm]
    result = generate(runner, BLOCK, max_tokens=tokens, lookup=lookup)
    assert len(result.tokens) == tokens
    rounds = result.stats.rounds
    return result.timings.decode_s / rounds * 1e6, rounds, result.stats.accepted


def main() -> None:
    parser = BenchParser(description="engine loop overhead per round")
    parser.add_argument("--tokens", type=positive_int, default=2000,
                        help="new tokens per timed call (default 2000)")
    parser.add_argument("--repeats", type=positive_int, default=15,
                        help="timed calls per arm, their median reported (default 15)")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}, {args.tokens} tokens")
    for arm in TARGET_US:
        measure(arm, args.tokens)  # warm-up, not timed
        runs = [measure(arm, args.tokens) for _ in range(args.repeats)]
        us = sorted(r[0] for r in runs)
        _, rounds, accepted = runs[0]
        median = statistics.median(us)
        verdict = "ok" if median <= TARGET_US[arm] else "OVER TARGET"
        print(
            f"{arm:8s} {median:7.2f} us/round  [min {us[0]:.2f}, max {us[-1]:.2f}]  "
            f"rounds={rounds} accepted={accepted}  target <= {TARGET_US[arm]:.0f} us: {verdict}"
        )


if __name__ == "__main__":
    run_main(main)
