"""Greedy parity of prompt lookup against plain decoding per torch tiny family, wider than
the tests: `--prompts` copy-heavy prompts per cell (the tests' own), every policy, float64
and float32, the installed transformers' way back for recurrent layers (or `--recurrent`).

    .venv/bin/python bench/families.py
    .venv/bin/python bench/families.py mamba jamba --recurrent refeed
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from specfleet.engine.loop import generate  # noqa: E402
from specfleet.engine.runners.tiny_torch import TINY_FAMILIES, tiny_runner  # noqa: E402
from tests.engine.runners.test_families_torch import (  # noqa: E402
    POLICIES,
    PROMPT_SEEDS,
    REPLY_TOKENS,
    copy_heavy_prompt,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", default=list(TINY_FAMILIES))
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--recurrent", choices=["record", "refeed"], default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny models run fastest single-threaded
    print("| family | dtype | rollback | " + " | ".join(POLICIES) + " | proposed | accepted |")
    print("|---" * (len(POLICIES) + 5) + "|")
    for family in args.families:
        for dtype in (torch.float64, torch.float32):
            runner = tiny_runner(family, dtype=dtype, recurrent=args.recurrent)
            built = next(runner.model.parameters()).dtype
            if built != dtype:  # a family without float64 kernels: its float32 row follows
                continue
            identical = dict.fromkeys(POLICIES, 0)
            proposed = accepted = 0
            seeds = range(PROMPT_SEEDS[0], PROMPT_SEEDS[0] + args.prompts)
            for seed in seeds:
                prompt = copy_heavy_prompt(runner, seed)
                plain = generate(runner, prompt, max_tokens=REPLY_TOKENS).tokens
                for name, config in POLICIES.items():
                    if runner.lookup_refusal is not None:
                        continue
                    got = generate(runner, prompt, max_tokens=REPLY_TOKENS, lookup=config)
                    identical[name] += got.tokens == plain
                    proposed += got.stats.proposed
                    accepted += got.stats.accepted
            cells = ("refused" if runner.lookup_refusal else f"{identical[n]}/{len(seeds)}"
                     for n in POLICIES)
            print(f"| {family} | {str(dtype).removeprefix('torch.')} | {runner.rollback_kind} | "
                  f"{' | '.join(cells)} | {proposed} | {accepted} |")


if __name__ == "__main__":
    main()
