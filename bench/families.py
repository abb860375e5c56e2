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

from bench.cli_args import BenchParser, positive_int, run_main  # noqa: E402
from specfleet.engine.loop import generate  # noqa: E402
from specfleet.engine.runners.tiny_torch import TINY_FAMILIES, tiny_runner  # noqa: E402
from specfleet.engine.runners.torch_rollback import RecurrentRollback  # noqa: E402
from tests.engine.runners.family_cases import (  # noqa: E402
    POLICIES,
    PROMPT_SEEDS,
    REPLY_TOKENS,
    copy_heavy_prompt,
)


def parity_row(family: str, dtype: torch.dtype, device: str = "cpu", prompts: int = 8,
               recurrent: RecurrentRollback | None = None) -> dict | None:
    """One family in one dtype on `device`: on how many of `prompts` copy-heavy prompts each
    policy's reply equals plain's, and the proposals verified and landed; None where the
    family cannot build in `dtype` (no float64 kernels: its float32 row stands for it)."""
    runner = tiny_runner(family, device, dtype, recurrent=recurrent)
    if next(runner.model.parameters()).dtype != dtype:
        return None
    refused = runner.lookup_refusal is not None
    identical = dict.fromkeys(POLICIES, 0)
    proposed = accepted = 0
    for seed in range(PROMPT_SEEDS[0], PROMPT_SEEDS[0] + prompts):
        prompt = copy_heavy_prompt(runner, seed)
        plain = generate(runner, prompt, max_tokens=REPLY_TOKENS).tokens
        for name, config in POLICIES.items():
            if refused:
                continue
            got = generate(runner, prompt, max_tokens=REPLY_TOKENS, lookup=config)
            identical[name] += got.tokens == plain
            proposed += got.stats.proposed
            accepted += got.stats.accepted
    return {"family": family, "dtype": str(dtype).removeprefix("torch."),
            "rollback": runner.rollback_kind, "refused": refused, "identical": identical,
            "prompts": prompts, "proposed": proposed, "accepted": accepted}


HEADER = ("| family | dtype | rollback | " + " | ".join(POLICIES) + " | proposed | accepted |\n"
          + "|---" * (len(POLICIES) + 5) + "|")


def row_line(row: dict) -> str:
    """`parity_row`'s row as a line of the markdown table under `HEADER`."""
    cells = ("refused" if row["refused"] else f"{row['identical'][n]}/{row['prompts']}"
             for n in POLICIES)
    return (f"| {row['family']} | {row['dtype']} | {row['rollback']} | {' | '.join(cells)} | "
            f"{row['proposed']} | {row['accepted']} |")


def tiny_family(name: str) -> str:
    """A `type=` converter in place of `choices`, which on a `nargs="*"` positional also
    refuses its list default (Python 3.11): the plain `bench/families.py` was refused."""
    if name not in TINY_FAMILIES:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {name!r} (choose from {', '.join(map(repr, TINY_FAMILIES))})")
    return name


def main() -> None:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument("families", nargs="*", default=list(TINY_FAMILIES), type=tiny_family,
                        metavar="FAMILY",
                        help=f"tiny cache families to run (default all: {', '.join(TINY_FAMILIES)})")
    parser.add_argument("--prompts", type=positive_int, default=8,
                        help="copy-heavy prompts per family and dtype (default 8)")
    parser.add_argument("--recurrent", choices=["record", "refeed"], default=None,
                        help="how recurrent layers go back after a verify: state kept per "
                             "token or re-fed (default: the installed transformers' way)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # tiny models run fastest single-threaded
    print(HEADER)
    for family in args.families:
        for dtype in (torch.float64, torch.float32):
            row = parity_row(family, dtype, prompts=args.prompts, recurrent=args.recurrent)
            if row is not None:
                print(row_line(row))


if __name__ == "__main__":
    run_main(main)
