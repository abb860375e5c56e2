"""Few-row verifies on torch/CPU with the other matrix layout: what they cost, and whether a
reply gets faster.

A verify of w rows multiplies a (w x in) block by every weight. MKL picks its kernel by the
call's shape; on some hosts (an AMD EPYC VM: MKL's non-Intel path) `x @ W.T` with 2-8 rows
costs nearly what 2-8 separate rows do, while `(W @ x.T).T` (the same product, the small
operand on the other side) streams the weight once. This script runs the bundled model with
both layouts in one process: it measures a width-cost table for each (`widthcosts`, quick
settings), then plain, `calibrated` on the stock layout and `calibrated` with 2-`--rows`-row
forwards in the other layout (each under its own table), arms rotated every repeat, and
prints each arm's whole-call speed-up over plain and whether every reply is the same. The
layout is switched by a `TorchFunctionMode` around the runner's multi-row forwards only:
plain steps (one row) and transformers' own modules are untouched.

    .venv/bin/python bench/fewrow_layout.py --prompts edit_fn:40,story:32,write:48 --repeats 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cli_args import BenchParser, positive_int, run_main  # noqa: E402

LINEAR = {F.linear, torch._C._nn.linear}


def prompt_limits(text: str) -> list[tuple[str, int]]:
    """`--prompts edit_fn:40,story:32`: packaged prompts, each with its new-token limit."""
    from specfleet.configs import packaged_names, prompts_dir

    known = packaged_names(prompts_dir())
    pairs = [item.partition(":")[::2] for item in text.split(",")]
    if not all(name in known and limit.isdigit() and int(limit) >= 1 for name, limit in pairs):
        raise argparse.ArgumentTypeError(
            f"expected NAME:TOKENS,... with NAME one of {', '.join(known)} and TOKENS at least "
            f"1, got {text!r}")
    return [(name, int(limit)) for name, limit in pairs]


class SmallOperandLeft(TorchFunctionMode):
    """`linear(x, W)` computed as `(W @ x.T).T` when x has 2..`rows` rows."""

    def __init__(self, rows: int) -> None:
        super().__init__()
        self.rows = rows

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in LINEAR:
            x, weight = args[0], args[1]
            rows = x.numel() // x.shape[-1]
            if 2 <= rows <= self.rows:
                bias = args[2] if len(args) > 2 else kwargs.get("bias")
                out = (weight @ x.reshape(rows, x.shape[-1]).t()).t()
                if bias is not None:
                    out = out + bias
                return out.reshape(*x.shape[:-1], weight.shape[0])
        return func(*args, **kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    from specfleet.cli.localmodel import load_model
    from specfleet.configs import prompts_dir
    from specfleet.engine.config import PromptLookupConfig
    from specfleet.engine.loop import generate, warm_up_verify_widths
    from specfleet.engine.widthcosts import QUICK, measure_width_costs

    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", default="edit_fn:40,story:32,write:48", type=prompt_limits,
                        help="packaged prompts and their token limits, NAME:TOKENS,...")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed calls of every arm per prompt (default 5)")
    parser.add_argument("--rows", type=positive_int, default=8,
                        help="widest forward given the layout (default 8)")
    args = parser.parse_args(argv)

    runner = load_model("smollm2-135m", "torch", "cpu").runner
    stock_run = runner._run
    layout: dict[str, bool] = {"on": False}

    def run(ids, logits_to_keep=0):
        width = ids.shape[-1] if isinstance(ids, torch.Tensor) else len(ids)
        if layout["on"] and width >= 2:
            with SmallOperandLeft(args.rows):
                return stock_run(ids, logits_to_keep)
        return stock_run(ids, logits_to_keep)

    runner._run = run
    tables = {}
    for on in (False, True):
        layout["on"] = on
        tables[on] = measure_width_costs(runner, QUICK, progress=lambda line: None).ratio
        print(f"{'other' if on else 'stock'} layout, widths 1-10:",
              " ".join(f"{c:.2f}" for c in tables[on][:10]), flush=True)
    arms = {"plain": (False, None)}
    for name, on in (("calibrated", False), ("calibrated, other layout", True)):
        arms[name] = (on, PromptLookupConfig(max_draft=32, policy="calibrated",
                                             costs=tuple(tables[on])))
    names = list(arms)
    for prompt, tokens in args.prompts:
        text = (prompts_dir() / f"{prompt}.txt").read_text(encoding="utf-8")
        ids = runner.encode_prompt(text, chat=True)
        seconds: dict[str, list[float]] = {name: [] for name in names}
        replies: dict[str, set[tuple[int, ...]]] = {name: set() for name in names}
        for rep in range(args.repeats):
            for name in names[rep % len(names):] + names[:rep % len(names)]:
                layout["on"], lookup = arms[name]
                warm_up_verify_widths(runner, ids, 32)
                done = generate(runner, ids, max_tokens=tokens, lookup=lookup)
                seconds[name].append(done.timings.total_s)
                replies[name].add(tuple(done.tokens))
        plain = statistics.median(seconds["plain"])
        same = len(set().union(*replies.values())) == 1
        print(f"{prompt} ({tokens} tokens):", ", ".join(
            f"{name} {plain / statistics.median(s):.3f}x" for name, s in seconds.items()),
            "; every reply the same" if same else "; REPLIES DIFFER", flush=True)
    return 0


if __name__ == "__main__":
    run_main(main)
