"""Forward passes side by side: what each prompt-lookup arm asks of the model, free of timing
noise (torch, the bundled model).

For each prompt, transformers' prompt lookup (10 tokens) and specfleet's plain, graded and
calibrated arms (and calibrated on the spec's proposals only, `calibrated_uncycled`: as it
was before it cycled a cut-short proposal) generate the same greedy reply once; a hook on the model's `forward` records
the width (query tokens) of every decode forward. Each arm's decode then costs, under a
width-cost table (verify width w = `costs[w-1]` pipelined plain steps), the sum over its
forwards: a speed-up free of the box's noise (`plain cost / arm cost`), beside the forwards'
measured seconds. The table is this engine's quick calibration unless `--costs` gives one.
The record also gives each reply's loop share (`engine.stats.loop_share`: the part inside a
trailing repeated cycle): in a period-p cycle the spec's drafter proposes at most p tokens a round (spec 1.3, no cyclic self-extension), while
transformers' earliest-match search runs `prompt_lookup_num_tokens` through the cycle.

    .venv/bin/python bench/forwards.py --out docs/benchmark_results/forwards.md
    .venv/bin/python bench/forwards.py --prompts list_copy,story --tokens 48
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cli_args import BenchParser, names_in, positive_int, run_main  # noqa: E402
from bench.peers import PEER_LOOKUP_TOKENS, environment  # noqa: E402
from bench.policies import MODEL, known_prompts, prompt_texts  # noqa: E402
from bench.policies_prompts import kind_of  # noqa: E402

DEFAULT_PROMPTS = ("edit_fn", "edit_json", "summary", "list_copy", "rename_var", "csv_fix",
                   "write", "story")


@dataclass(frozen=True)
class ArmForwards:
    """One arm's decode forwards on one prompt."""

    arm: str
    tokens: list[int]
    widths: list[int]  # query width of every decode forward, in order
    seconds: float  # the decode forwards' measured time, summed

    def cost(self, costs: Sequence[float]) -> float:
        """Decode cost in pipelined plain steps under `costs` (`calibrated.width_cost`)."""
        from specfleet.engine.calibrated import width_cost

        return sum(width_cost(costs, w) for w in self.widths)


class ForwardLog:
    """Wraps a torch model's `forward` to record each call's query width and seconds."""

    def __init__(self, model) -> None:
        self.calls: list[tuple[int, float]] = []
        inner = model.forward

        def forward(*args, **kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            start_s = time.perf_counter()
            out = inner(*args, **kwargs)
            width = int(ids.shape[1]) if ids is not None else 0
            self.calls.append((width, time.perf_counter() - start_s))
            return out

        model.forward = forward

    def record(self, arm: str, run: Callable[[], list[int]]) -> ArmForwards:
        """Run `run` and keep its decode forwards (the first call is the prefill)."""
        self.calls.clear()
        tokens = run()
        decode = self.calls[1:]
        return ArmForwards(arm, tokens, [w for w, _ in decode], sum(s for _, s in decode))


def arms(runner, ids: list[int], max_tokens: int, costs: tuple[float, ...]):
    """(name, zero-argument call returning the reply's tokens) per arm."""
    import torch

    from specfleet.engine.calibrated import CalibratedGovernor
    from specfleet.engine.config import PromptLookupConfig
    from specfleet.engine.loop import generate, warm_up_verify_widths

    eos = sorted(runner.eos_ids)

    def hf_lookup() -> list[int]:
        input_ids = torch.tensor([ids], dtype=torch.long)
        with torch.inference_mode():
            out = runner.model.generate(
                input_ids, attention_mask=torch.ones_like(input_ids), max_new_tokens=max_tokens,
                do_sample=False, eos_token_id=eos, pad_token_id=eos[0],
                prompt_lookup_num_tokens=PEER_LOOKUP_TOKENS)
        reply = out[0, len(ids):].tolist()
        return reply[:next((i for i, t in enumerate(reply) if t in eos), len(reply))]

    def ours(lookup) -> Callable[[], list[int]]:
        return lambda: list(generate(runner, ids, max_tokens=max_tokens, lookup=lookup).tokens)

    def uncycled(config) -> Callable[[], list[int]]:
        """`config` with the spec's proposals only: calibrated as it was before it cycled."""
        def run() -> list[int]:
            CalibratedGovernor.cycles = False
            try:
                return ours(config)()
            finally:
                CalibratedGovernor.cycles = True
        return run

    policy = {"graded": PromptLookupConfig(max_draft=7, policy="graded"),
              "calibrated": PromptLookupConfig(max_draft=32, policy="calibrated", costs=costs)}
    warm_up_verify_widths(runner, ids, 32)  # every width either arm verifies, untimed
    return [(f"hf_lookup{PEER_LOOKUP_TOKENS}", hf_lookup), ("plain", ours(None)),
            *((name, ours(config)) for name, config in policy.items()),
            ("calibrated_uncycled", uncycled(policy["calibrated"]))]


def width_costs(text: str) -> tuple[float, ...]:
    """`--costs`: widths 1..n, each a positive finite number; the calibrated arm needs two."""
    try:
        costs = tuple(float(x) for x in text.split(","))
    except ValueError:
        costs = ()
    if len(costs) < 2 or not all(math.isfinite(c) and c > 0 for c in costs):
        raise argparse.ArgumentTypeError(
            f"expected a comma list of at least two positive numbers, got {text!r}")
    return costs


def measure_costs(runner, given: tuple[float, ...] | None) -> tuple[float, ...]:
    """The width-cost table: `given` (widths 1..n) or a quick calibration."""
    if given:
        return given
    from specfleet.engine.widthcosts import QUICK, measure_width_costs

    return tuple(measure_width_costs(runner, replace(QUICK, max_width=33)).ratio)


def render(rows: list[dict], costs: tuple[float, ...], env: dict, command: str) -> str:
    names = [a.arm for a in rows[0]["arms"]]
    out = ["# Forward passes side by side (torch, bundled model)", "",
           f"Command: `{command}`", "",
           "Environment: " + ", ".join(f"{k}={v}" for k, v in env.items()), "",
           "Width costs (pipelined plain steps, widths 1..n): "
           + " ".join(f"{c:.2f}" for c in costs), "",
           "Per arm: decode forwards, their widths (width x count), decode cost under the "
           "table and the speed-up it gives over plain (`cost x`), and the forwards' measured "
           "seconds. `loop share`: the part of the reply inside a trailing repeated cycle.", "",
           "| prompt | kind | loop share | " + " | ".join(names) + " |",
           "|---|---|---|" + "---|" * len(names)]
    for row in rows:
        plain = next(a for a in row["arms"] if a.arm == "plain").cost(costs)
        cells = []
        for arm in row["arms"]:
            widths = ", ".join(f"{w}x{n}" for w, n in sorted(Counter(arm.widths).items()))
            cells.append(f"{len(arm.widths)} fwd ({widths}); cost {arm.cost(costs):.1f} = "
                         f"{plain / arm.cost(costs):.2f}x; {arm.seconds:.2f} s")
        out.append(f"| {row['prompt']} | {row['kind']} | {row['loop']:.2f} | "
                   + " | ".join(cells) + " |")
    differ = [row["prompt"] for row in rows
              if len({tuple(a.tokens) for a in row["arms"]}) > 1]
    out += ["", "Replies identical across arms: " + ("yes" if not differ else
                                                     "no: " + ", ".join(differ)), ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = BenchParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--prompts", default=",".join(DEFAULT_PROMPTS),
                        type=names_in(known_prompts()),
                        help="comma list of prompt names, as bench/policies.py takes them "
                             f"(default {','.join(DEFAULT_PROMPTS)})")
    parser.add_argument("--tokens", type=positive_int, default=48,
                        help="new tokens per reply (default 48)")
    parser.add_argument("--costs", default=None, type=width_costs,
                        help="width costs 1..n in pipelined plain steps, comma list of at "
                             "least two positive numbers (default: a quick calibration)")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the markdown record to this file")
    args = parser.parse_args(argv)
    from specfleet.cli.localmodel import load_model
    from specfleet.engine.stats import loop_share

    runner = load_model(MODEL, "torch", "cpu").runner
    costs = measure_costs(runner, args.costs)
    log = ForwardLog(runner.model)
    rows = []
    for name, text in prompt_texts(args):
        ids = runner.encode_prompt(text, chat=True)
        results = [log.record(arm, run) for arm, run in arms(runner, ids, args.tokens, costs)]
        rows.append({"prompt": name, "kind": kind_of(name), "arms": results,
                     "loop": loop_share(results[1].tokens)})
        print(f"{name}: " + "; ".join(f"{a.arm} {len(a.widths)} fwd" for a in results),
              file=sys.stderr)
    command = "python bench/forwards.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(rows, costs, environment(), command)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    run_main(main)
