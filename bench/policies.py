"""Drafting policies side by side: plain, graded, gated, calibrated (and transformers'
prompt lookup on torch), per engine in its own process, arms interleaved.

Per engine (torch fp32, MLX fp32, MLX 4-bit, all on CPU, a bundled model) a child process
loads the model once, measures a width-cost table with the quick calibration settings (the
calibrated arm's table, as a worker without a stored one would), warms every arm, then for
each prompt and repeat runs the arms back to back in an order rotated every repeat. A cell
is the median of the repeats of whole-call tok/s (prefill included), over specfleet plain
of the same engine. Then, from each prompt's plain reply, `engine.predict.replay` recomputes
every policy's rounds and predicts its speed-up (a) under this engine's measured table, set
beside the measured speed-up (the replay's error), and (b) under the packaged GB10 and
Apple Silicon tables (decode loop only: their prefill cost is unknown). Under each engine's
table the record also gives every policy's efficiency against the oracle bound
(`engine.oracle`: the cheapest schedule over the same n-gram index; 1.0 = no better schedule
existed).

    .venv/bin/python bench/policies.py --out docs/benchmark_results/policies.md
    .venv/bin/python bench/policies.py --engines torch --prompts edit_fn,story --repeats 1
    .venv/bin/python bench/policies.py --model gemma3-270m    # torch and MLX fp32 (no 4-bit form)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cli_args import (  # noqa: E402
    BenchParser,
    names_in,
    positive_int,
    run_main,
    whole_number,
)
from bench.peers import (  # noqa: E402
    PEER_LOOKUP_TOKENS,
    Arm,
    Outcome,
    environment,
    measure,
    transformers_arm,
)
from bench.policies_prompts import (  # noqa: E402
    COPY_HEAVY,
    HELD_OUT_COPY_HEAVY,
    HELD_OUT_DIR,
    HELD_OUT_PROSE,
    OWN_PROMPTS,
    PROSE,
)

CONFIG_PROMPTS = ("edit_fn", "edit_json", "summary", "write", "story")
MODEL = "smollm2-135m"
ENGINES = {"torch": "torch", "mlx": "mlx", "mlx-q4": "mlx"}  # arm engine -> runner engine
Q4_ALIASES = {"smollm2-135m": "smollm2-135m-q4"}  # the exact 4-bit MLX form, where there is one
POLICIES = ("graded", "gated", "calibrated")
FOREIGN_TABLES = ("gb10-qwen3-1.7b", "gb10-qwen3-8b", "apple-m4pro")


def sf_arm(name: str, runner, lookup, pipeline: bool | None = None) -> Arm:
    """specfleet's loop, warmed over the arm's verify widths before each timed call; keeps
    what the replay needs (prefill and decode seconds). `pipeline` as `loop.rounds` takes it
    (None: as the host's loop does)."""
    from specfleet.engine.loop import generate, warm_up_verify_widths

    max_draft = lookup.max_draft if lookup is not None else 7

    def run(ids: list[int], max_tokens: int) -> Outcome:
        warm_up_verify_widths(runner, ids, max_draft)
        result = generate(runner, ids, max_tokens=max_tokens, lookup=lookup, pipeline=pipeline)
        s, t = result.stats, result.timings
        counters = {"rounds": s.rounds, "drafted": s.drafted_rounds, "proposed": s.proposed,
                    "accepted": s.accepted, "prefill_s": t.prefill_s, "decode_s": t.decode_s,
                    "stop": result.stop_reason}
        return Outcome(list(result.tokens), t.total_s, counters)

    return Arm(name, run)


def child(engine: str, args: argparse.Namespace) -> dict:
    """Everything one engine measures, as JSON-ready data."""
    from specfleet.cli.localmodel import load_model
    from specfleet.engine.config import PromptLookupConfig
    from specfleet.engine.loop import may_pipeline
    from specfleet.engine.sampling import SamplerConfig
    from specfleet.engine.widthcosts import QUICK, measure_width_costs

    kind = ENGINES[engine]
    model = Q4_ALIASES[args.model] if engine == "mlx-q4" else args.model
    loaded = load_model(model, kind, "cpu")
    runner = loaded.runner
    start_s = time.perf_counter()
    settings = replace(QUICK, rounds=args.cal_rounds, max_width=args.cal_max_width)
    table = measure_width_costs(runner, settings, progress=lambda line: log(f"{engine}: {line}"))
    calibrate_s = time.perf_counter() - start_s
    arms = [sf_arm("plain", runner, None)]
    for policy in POLICIES:
        costs = table.ratio if policy == "calibrated" else ()
        max_draft = 32 if policy == "calibrated" else 7
        arms.append(sf_arm(policy, runner, PromptLookupConfig(
            max_draft=max_draft, policy=policy, costs=costs)))
    if kind == "torch":
        arms.append(transformers_arm("hf_lookup10", runner.model, runner.eos_ids,
                                     PEER_LOOKUP_TOKENS))
    prompts = {name: runner.encode_prompt(text, chat=True) for name, text in prompt_texts(args)}
    limits = {name: args.tokens for name in prompts}
    measure(arms, prompts, limits, args.repeats, lambda line: log(f"{engine}: {line}"))
    return {
        "engine": engine, "model": model, "calibrate_s": calibrate_s,
        # How this host's loop ran the arms (torch on a CPU: synchronous), for the replay.
        "pipelines": may_pipeline(runner, SamplerConfig()),
        "table": {"ratio": table.ratio, "lo": table.ratio_lo, "hi": table.ratio_hi, "n": table.n,
                  "flagged": table.flagged, "pipelined_ms": table.pipelined_ms},
        "prompts": {name: ids for name, ids in prompts.items()},
        "limits": limits,
        "arms": {arm.name: {p: [{"tokens": o.tokens, "total_s": o.total_s,
                                 "counters": o.counters} for o in outs]
                            for p, outs in arm.outcomes.items()} for arm in arms},
    }


def prompt_texts(args: argparse.Namespace) -> list[tuple[str, str]]:
    from specfleet.configs import prompts_dir

    out = []
    for name in args.prompts.split(","):
        if name in OWN_PROMPTS:
            out.append((name, OWN_PROMPTS[name]))
        elif name in HELD_OUT_COPY_HEAVY or name in HELD_OUT_PROSE:
            out.append((name, (HELD_OUT_DIR / f"{name}.txt").read_text(encoding="utf-8")))
        else:
            out.append((name, (prompts_dir() / f"{name}.txt").read_text(encoding="utf-8")))
    return out


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def rate(run: dict) -> float:
    return len(run["tokens"]) / run["total_s"] if run["total_s"] > 0 else 0.0


def median_rate(data: dict, arm: str, prompt: str) -> float:
    return statistics.median(rate(r) for r in data["arms"][arm][prompt])


def spread(data: dict, arm: str, prompt: str) -> float:
    rates = [rate(r) for r in data["arms"][arm][prompt]]
    return (max(rates) - min(rates)) / statistics.median(rates) if rates else 0.0


def predictions(data: dict, prompt: str, costs: Sequence[float], whole_call: bool,
                pipeline: bool = True) -> dict:
    """Predicted speed-up of each policy on this prompt's plain reply under `costs` (a host
    whose loop pipelines unless `pipeline` is False)."""
    from specfleet.engine.predict import predicted_speedup, replay

    plain = data["arms"]["plain"][prompt][0]
    ids, reply, limit = data["prompts"][prompt], plain["tokens"], data["limits"][prompt]
    stop = plain["counters"]["stop"]
    base = replay(ids, reply, stop_reason=stop, max_tokens=limit, lookup=None, costs=costs,
                  pipeline=pipeline)
    prefill = 0.0
    if whole_call:
        runs = data["arms"]["plain"][prompt]
        prefill = statistics.median(r["counters"]["prefill_s"] / (r["counters"]["decode_s"]
                                    / r["counters"]["rounds"]) for r in runs)
    out = {}
    for policy in POLICIES:
        done = replay(ids, reply, stop_reason=stop, max_tokens=limit,
                      lookup=policy_config(policy, costs), costs=costs, pipeline=pipeline)
        out[policy] = predicted_speedup(base.cost_steps, done.cost_steps, prefill)
    return out


def policy_config(policy: str, costs: Sequence[float]):
    from specfleet.engine.config import PromptLookupConfig

    return PromptLookupConfig(max_draft=32 if policy == "calibrated" else 7, policy=policy,
                              costs=tuple(costs))


def efficiencies(data: dict, prompt: str, costs: Sequence[float], pipeline: bool = True) -> dict:
    """Oracle cost over each policy's replayed cost on this prompt's plain reply under
    `costs` (decode loop; a host whose loop pipelines unless `pipeline` is False), and under
    "ceiling" the oracle's decode speed-up over plain."""
    from specfleet.engine.oracle import oracle
    from specfleet.engine.predict import replay

    plain = data["arms"]["plain"][prompt][0]
    ids, reply, limit = data["prompts"][prompt], plain["tokens"], data["limits"][prompt]
    stop = plain["counters"]["stop"]
    widest = max((policy_config(p, costs) for p in POLICIES), key=lambda c: c.max_draft)
    best = oracle(ids, reply, stop_reason=stop, max_tokens=limit, lookup=widest, costs=costs)
    base = replay(ids, reply, stop_reason=stop, max_tokens=limit, lookup=None, costs=costs,
                  pipeline=pipeline)
    out = {"ceiling": base.cost_steps / best.cost_steps if best.cost_steps else 1.0}
    for policy in POLICIES:
        done = replay(ids, reply, stop_reason=stop, max_tokens=limit,
                      lookup=policy_config(policy, costs), costs=costs, pipeline=pipeline)
        out[policy] = best.efficiency(done.cost_steps)
    return out


def render(results: list[dict], env: dict, command: str, args) -> str:
    from bench.policies_report import render_markdown

    return render_markdown(results, env, command, args, predictions, median_rate, spread,
                           efficiencies)


def known_prompts() -> tuple[str, ...]:
    """Every name `--prompts` takes: the packaged prompts, this benchmark's own, the held-out."""
    from specfleet.configs import packaged_names, prompts_dir

    return (*packaged_names(prompts_dir()), *OWN_PROMPTS, *HELD_OUT_COPY_HEAVY, *HELD_OUT_PROSE)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    from specfleet.engine.widthcosts import MAX_ROUNDS

    parser = BenchParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--model", default=MODEL,
                        help=f"model alias (default {MODEL}; gemma3-270m is the other bundled one)")
    parser.add_argument("--engines", default=None, type=names_in(ENGINES),
                        help="comma list of torch, mlx, mlx-q4 (default: all the model has)")
    parser.add_argument("--prompts", default=",".join([*CONFIG_PROMPTS, *OWN_PROMPTS]),
                        type=names_in(known_prompts()),
                        help="comma list of packaged, own (bench/policies_prompts.py) or "
                             "held-out (bench/heldout/) prompt names (default: the five "
                             "packaged and the six own)")
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed calls of every arm per prompt (default 5)")
    parser.add_argument("--tokens", type=positive_int, default=48,
                        help="new tokens per reply (default 48)")
    parser.add_argument("--cal-rounds", type=whole_number(1, MAX_ROUNDS), default=3,
                        help="calibration rounds (default 3)")
    # The calibrated policy needs the cost of widths 1 and 2 at least.
    parser.add_argument("--cal-max-width", type=whole_number(2), default=33,
                        help="widest verify width calibrated (default 33: the calibrated "
                             "arm's 32 proposals and its bonus token)")
    parser.add_argument("--out", type=Path, default=None,
                        help="also write the markdown record to this file")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    has = [e for e in ENGINES if e != "mlx-q4" or args.model in Q4_ALIASES]
    engines = args.engines or ",".join(has)
    if "mlx-q4" in engines.split(",") and args.model not in Q4_ALIASES:
        parser.error(f"--engines mlx-q4: {args.model} has no 4-bit MLX alias (those that do: "
                     f"{', '.join(Q4_ALIASES)})")
    args.engines = engines
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to say and act on
        args.json_out.write_text(json.dumps(child(args.child, args)))
        return 0
    env = environment()
    env["load_before"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results = []
    for engine in args.engines.split(","):
        out = Path(f"/tmp/specfleet-policies-{os.getpid()}-{engine}.json")
        base = [a for a in (argv if argv is not None else sys.argv[1:])]
        child_run = subprocess.run([sys.executable, __file__, *base, "--child", engine,
                                    "--json-out", str(out)])  # one process per engine
        if child_run.returncode != 0:
            return child_run.returncode  # the child said why, in one line or a traceback
        results.append(json.loads(out.read_text()))
        out.unlink()
    env["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    command = "python bench/policies.py " + " ".join(sys.argv[1:] if argv is None else argv)
    text = render(results, env, command, args)
    print(text)
    if args.out is not None:
        args.out.write_text(text)
        log(f"wrote {args.out}")
    return 0


__all__ = ["COPY_HEAVY", "PROSE", "FOREIGN_TABLES"]

if __name__ == "__main__":
    run_main(main)
