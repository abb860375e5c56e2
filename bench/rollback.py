"""What a rollback costs per verify, per cache family, as a share of one plain step.

For each model: a plain synchronous one-token step is timed, and two verify cycles are timed
interleaved: a block of `--width` tokens, its host read, a rollback, then one more
one-token step and its read (so lazy work of the rollback is paid inside the cycle):

- `kept all`: rollback(0), nothing undone (every proposal accepted);
- `reject`: rollback(width - 2): one proposal accepted, the rest undone (a trim, or on a
  recurrent model: restore + re-feed of the 2 kept tokens).

overhead = median(reject) - median(kept all), reported as a share of the plain step. Tiny
family models by default (`engine/runners/tiny_*.py`); `--model ALIAS` measures a real one.
On torch a recurrent family is measured both ways back where both run: `trim` (recorded per
token during the verify, transformers 5.25+) and `refeed`; compare their reject cycles.

    .venv/bin/python bench/rollback.py --engine torch
    .venv/bin/python bench/rollback.py --engine mlx --model gemma3-270m --prompt-tokens 600
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cli_args import BenchParser, positive_int, run_main, whole_number  # noqa: E402
from specfleet.engine.runners.toy import lcg_tokens  # noqa: E402


def _step(runner, token: int) -> int:
    return runner.read_tokens(runner.argmax(runner.forward([token])))[-1]


def _cycle(runner, token: int, width: int, undo: int) -> float:
    start = time.perf_counter()
    runner.read_tokens(runner.argmax(runner.forward([token] * width)))
    runner.rollback(undo)
    _step(runner, token)
    return time.perf_counter() - start


def measure(runner, prompt: list[int], width: int, repeats: int) -> dict:
    """Median plain step, median cycles with and without a rejection, in seconds."""
    runner.reset()
    token = runner.read_tokens(runner.argmax(runner.prefill(prompt)))[0]
    for _ in range(3):  # warm every kernel used below
        _cycle(runner, token, width, width - 2)
        _step(runner, token)
    plain, kept, reject = [], [], []
    for _ in range(repeats):  # interleaved: drift falls on all three alike
        start = time.perf_counter()
        _step(runner, token)
        plain.append(time.perf_counter() - start)
        kept.append(_cycle(runner, token, width, 0))
        reject.append(_cycle(runner, token, width, width - 2))
    step = statistics.median(plain)
    overhead = statistics.median(reject) - statistics.median(kept)
    return {"plain_step_ms": step * 1e3, "overhead_ms": overhead * 1e3,
            "kept_ms": statistics.median(kept) * 1e3, "reject_ms": statistics.median(reject) * 1e3,
            "share": overhead / step, "rollback": getattr(runner, "rollback_kind", "trim")}


def tiny_rows(engine: str, width: int, repeats: int) -> list[tuple[str, dict]]:
    tiny = importlib.import_module(f"specfleet.engine.runners.tiny_{engine}")
    rows = []
    for family in tiny.TINY_FAMILIES:
        runners = [tiny.tiny_runner(family)]
        if engine == "torch" and runners[0].rollback_kind == "trim" and any(
                kind.startswith("recurrent") for kind in runners[0]._rollback.kinds):
            refed = tiny.tiny_runner(family, recurrent="refeed")
            if refed.lookup_refusal is None:  # re-fed, its verify rows would not be exact
                runners.append(refed)
        for runner in runners:
            prompt = lcg_tokens(5, 24, int(runner.vocab_size))
            rows.append((family, measure(runner, prompt, width, repeats)))
    return rows


def model_rows(alias: str, engine: str, prompt_tokens: int, width: int,
               repeats: int) -> list[tuple[str, dict]]:
    from specfleet.models.registry import resolve_model
    from specfleet.workers.loaded import load_model

    runner = load_model(resolve_model(alias, engine), engine, "auto").runner
    prompt = lcg_tokens(5, prompt_tokens, min(int(runner.vocab_size), 30000) - 1)
    return [(alias, measure(runner, [p + 1 for p in prompt], width, repeats))]


def main() -> None:
    parser = BenchParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", choices=["torch", "mlx"], default="torch",
                        help="engine to measure on (default torch)")
    parser.add_argument("--model", help="a model alias (default: the tiny family models)")
    parser.add_argument("--prompt-tokens", type=positive_int, default=64,
                        help="prompt length with --model (default 64)")
    # A cycle rolls back `width - 2` rows: none at width 2, a negative count below it.
    parser.add_argument("--width", type=whole_number(2), default=5,
                        help="verify width (k + 1; default 5)")
    parser.add_argument("--repeats", type=positive_int, default=31,
                        help="timed cycles per row, their median reported (default 31)")
    args = parser.parse_args()
    if args.model:
        rows = model_rows(args.model, args.engine, args.prompt_tokens, args.width, args.repeats)
    else:
        rows = tiny_rows(args.engine, args.width, args.repeats)
    print(f"engine {args.engine}, verify width {args.width}, rollback of {args.width - 2} "
          f"rows, median of {args.repeats}")
    print("| model | rollback | plain step ms | kept-all cycle ms | reject cycle ms | "
          "overhead per rejected verify ms | share of a step |")
    print("|---|---|---|---|---|---|---|")
    for name, row in rows:
        print(f"| {name} | {row['rollback']} | {row['plain_step_ms']:.2f} | "
              f"{row['kept_ms']:.2f} | {row['reject_ms']:.2f} | "
              f"{row['overhead_ms']:.2f} | {row['share']:.2f} |")


if __name__ == "__main__":
    run_main(main)
