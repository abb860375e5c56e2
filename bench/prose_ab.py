"""Is an arm slower than plain decoding, or is the box noisy? Paired A/B with a plain control.

`bench/policies.py` times each arm a few times and divides medians; on a shared 2-core VM a
prose cell reads 0.94-0.97x there while the replay predicts the same rounds as plain. This
script asks the question directly: one engine, one loaded model, for each prompt `--pairs`
rounds of [plain, plain-control, ARM...] in an order rotated every round, each call warmed
over its verify widths first (as `policies.py`). Per prompt it gives the median whole-call
and decode-only seconds of each arm, and each arm's paired speed-up: in every round the arm's
decode time over plain's of the same round, median and range. `plain-control` is plain
decoding again: its paired speed-up is what pairing alone reads on this box (1.000 on a
quiet one), the band inside which an arm is not slower than plain.

    .venv/bin/python bench/prose_ab.py --prompts write,explain,story --pairs 12 --tokens 48 \
        --out docs/benchmark_results/prose-ab-2026-12-06.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cli_args import BenchParser, names_in, positive_int, run_main  # noqa: E402
from bench.peers import Arm, environment, rotated  # noqa: E402
from bench.policies import known_prompts, prompt_texts, sf_arm  # noqa: E402

CONTROL = "plain-control"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from specfleet.engine.policies import POLICIES

    parser = BenchParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m",
                        help="model alias or folder (default smollm2-135m)")
    parser.add_argument("--engine", default="torch", choices=("torch", "mlx"),
                        help="engine the model runs on, on the CPU (default torch)")
    parser.add_argument("--arms", default="calibrated,graded", type=names_in(POLICIES),
                        help=f"comma list of our policies beside plain ({', '.join(POLICIES)}; "
                             "default calibrated,graded)")
    parser.add_argument("--prompts", default="write,explain,story", type=names_in(known_prompts()),
                        help="comma list of prompt names, as bench/policies.py takes them "
                             "(default write,explain,story)")
    parser.add_argument("--pairs", type=positive_int, default=12,
                        help="rounds of every arm per prompt (default 12)")
    parser.add_argument("--tokens", type=positive_int, default=48,
                        help="new tokens per reply (default 48)")
    parser.add_argument("--pipelined", action="store_true",
                        help="add each arm again with its plain steps pipelined (`NAME-pipelined`): "
                             "what pipelining does on this host")
    parser.add_argument("--out", type=Path, help="write the markdown record here too")
    return parser.parse_args(argv)


def build_arms(runner, policies: list[str], log, pipelined: bool = False
               ) -> tuple[list[Arm], tuple[float, ...]]:
    """plain, its control and each policy, calibrated on a quick table measured here; with
    `pipelined`, plain and each policy again forced to pipeline."""
    from specfleet.engine.config import PromptLookupConfig
    from specfleet.engine.widthcosts import QUICK, measure_width_costs

    table = measure_width_costs(runner, replace(QUICK, max_width=33), progress=log).ratio
    arms = [sf_arm("plain", runner, None), sf_arm(CONTROL, runner, None)]
    if pipelined:
        arms.append(sf_arm("plain-pipelined", runner, None, pipeline=True))
    for policy in policies:
        calibrated = policy == "calibrated"
        lookup = PromptLookupConfig(policy=policy, max_draft=32 if calibrated else 7,
                                    costs=table if calibrated else ())
        arms.append(sf_arm(policy, runner, lookup))
        if pipelined:
            arms.append(sf_arm(f"{policy}-pipelined", runner, lookup, pipeline=True))
    return arms, table


def run(arms: list[Arm], prompts: dict[str, list[int]], pairs: int, tokens: int, log) -> None:
    """Every arm once untimed, then `pairs` rotated rounds per prompt."""
    first = next(iter(prompts.values()))
    for arm in arms:
        arm.run(first, 8)
    for name, ids in prompts.items():
        for pair in range(pairs):
            for arm in rotated(arms, pair):
                outcome = arm.run(ids, tokens)
                arm.outcomes.setdefault(name, []).append(outcome)
            log(f"{name} pair {pair + 1}/{pairs}")


def report(arms: list[Arm], prompts: list[str], table, args, env: dict) -> str:
    plain = arms[0]
    lines = [
        "# Paired A/B against plain decoding, with a plain control", "",
        f"Command: `python bench/prose_ab.py --engine {args.engine} --model {args.model} "
        f"--arms {args.arms} --prompts {args.prompts} --pairs {args.pairs} "
        f"--tokens {args.tokens}{' --pipelined' if args.pipelined else ''}`", "",
        "Environment: " + ", ".join(f"{k}={v}" for k, v in env.items()), "",
        "Width costs (quick calibration): " + " ".join(
            f"w{w}={table[w - 1]:.2f}" for w in (1, 2, 3, 4, 8, 16, 33) if w <= len(table)), "",
        "Paired speed-up = plain's decode seconds / the arm's, in the same round; median "
        f"[lowest-highest] over the rounds. `{CONTROL}` is plain again: the pairing's own "
        "reading on this box.", "",
        "| prompt | arm | rounds / drafted / proposed / landed | median decode ms | "
        "median whole ms | paired decode speed-up | paired whole speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in prompts:
        base = plain.outcomes[name]
        for arm in arms:
            outs = arm.outcomes[name]
            c = outs[0].counters or {}
            shape = (f"{c.get('rounds')} / {c.get('drafted')} / {c.get('proposed')} / "
                     f"{c.get('accepted')}")
            decode = [o.counters["decode_s"] for o in outs]
            whole = [o.total_s for o in outs]
            cells = [name, arm.name, shape, f"{statistics.median(decode) * 1000:.1f}",
                     f"{statistics.median(whole) * 1000:.1f}"]
            if arm is plain:
                cells += ["–", "–"]
            else:
                for key in ("decode", "whole"):
                    ratios = sorted(
                        (p.counters["decode_s"] / o.counters["decode_s"]) if key == "decode"
                        else (p.total_s / o.total_s) for p, o in zip(base, outs, strict=True))
                    cells.append(f"{statistics.median(ratios):.3f} "
                                 f"[{ratios[0]:.3f}-{ratios[-1]:.3f}]")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from specfleet.cli.localmodel import load_model

    args = parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    env = environment()
    runner = load_model(args.model, args.engine, "cpu").runner
    arms, table = build_arms(runner, args.arms.split(","), log, args.pipelined)
    names = args.prompts.split(",")
    prompts = {name: runner.encode_prompt(text, chat=True)
               for name, text in prompt_texts(argparse.Namespace(prompts=args.prompts))}
    started = time.perf_counter()
    run(arms, prompts, args.pairs, args.tokens, log)
    log(f"timed in {time.perf_counter() - started:.0f} s")
    text = report(arms, names, table, args, env)
    print(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    run_main(main)
