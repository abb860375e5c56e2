"""Verify-width warm-up cost, old against new, side by side in one process.

Old: prefill the whole prompt, then each verify width once (what `generate` paid before).
New: `warm_up_verify_widths`: each width once over the prompt's first 4 tokens, once per
loaded model per process. Reported as seconds and as the ratio new/old; the second call of
the new warm-up on the same loaded model costs nothing.

    .venv/bin/python bench/warmup.py --engine torch --prompt edit_fn
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.cli_args import BenchParser, positive_int, run_main  # noqa: E402
from specfleet.cli.localmodel import load_model  # noqa: E402
from specfleet.configs import packaged_names, prompts_dir  # noqa: E402
from specfleet.engine import warmup  # noqa: E402


def old_warm_up(runner, prompt: list[int], max_draft: int) -> float:
    start = time.perf_counter()
    runner.reset()
    runner.read_tokens(runner.argmax(runner.prefill(prompt)))
    for width in warmup.verify_widths(max_draft):
        runner.read_tokens(runner.argmax(runner.forward([prompt[-1]] * width)))
        runner.rollback(width - 1)  # a verify keeps its first token (Runner.rollback)
    return time.perf_counter() - start


def main() -> None:
    parser = BenchParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engine", default="torch", choices=("torch", "mlx"),
                        help="engine the bundled model runs on (default torch)")
    parser.add_argument("--prompt", default="edit_fn", choices=packaged_names(prompts_dir()),
                        help="packaged prompt (default edit_fn)")
    parser.add_argument("--max-draft", type=positive_int, default=7,
                        help="widest draft: widths 2..max-draft+1 are warmed (default 7)")
    parser.add_argument("--repeats", type=positive_int, default=3,
                        help="interleaved old/new pairs timed (default 3)")
    args = parser.parse_args()
    loaded = load_model("smollm2-135m", args.engine, "auto")
    runner = loaded.runner
    text = (prompts_dir() / f"{args.prompt}.txt").read_text()
    prompt = list(runner.encode_prompt(text, chat=True))
    old, new = [], []
    for _ in range(args.repeats):  # interleaved; the new one forgets the runner each time
        old.append(old_warm_up(runner, prompt, args.max_draft))
        warmup._warm_widths.pop(runner, None)
        new.append(warmup.warm_up_verify_widths(runner, prompt, args.max_draft))
    again = warmup.warm_up_verify_widths(runner, prompt, args.max_draft)
    mo, mn = statistics.median(old), statistics.median(new)
    print(f"engine {args.engine}, prompt {args.prompt} ({len(prompt)} tokens), widths "
          f"2..{args.max_draft + 1}, {args.repeats} repeats interleaved")
    print(f"old (full prefill + widths): median {mo:.3f} s {[round(v, 3) for v in old]}")
    print(f"new (4 tokens + widths):     median {mn:.3f} s {[round(v, 3) for v in new]}")
    print(f"new / old = {mn / mo:.2f}; a second call on the same loaded model: {again:.3f} s")


if __name__ == "__main__":
    run_main(main)
