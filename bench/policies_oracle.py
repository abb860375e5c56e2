"""Each policy's efficiency against the oracle bound, per cost table and prompt, from stored
greedy plain replies: the replay path only (no model), so it runs in seconds.

The same numbers as `specfleet replay MATRIX --costs TABLE --oracle` (decode loop, oracle
drafts up to 32), for the seven tables of docs/benchmark_results/oracle.md at once: one
markdown table per policy, then the mean and lowest over the copy-heavy and the prose
prompts (`policies_prompts.kind_of`). Several stores (each `--db` with its `--matrix`) pool
into one table; docs/benchmark_results/oracle-policy.md has the runs that made them.

    .venv/bin/python bench/policies_oracle.py --db /tmp/oracle-store/oracle.db \
        --matrix bench-ea432b
    .venv/bin/python bench/policies_oracle.py --db A.db --matrix M1 --db B.db --matrix M2 \
        --policies graded,gated,calibrated --json cells.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.cli_args import BenchParser, names_in, one_per, run_main  # noqa: E402
from specfleet.engine.config import PromptLookupConfig, default_max_draft  # noqa: E402
from specfleet.engine.governor import POLICY_NAMES, Policy  # noqa: E402
from specfleet.engine.oracle import oracle  # noqa: E402
from specfleet.engine.predict import replay  # noqa: E402

TABLES = (
    "gb10-qwen3-1.7b", "gb10-qwen3-4b", "gb10-qwen3-8b", "gb10-llama-3.1-8b", "apple-m4pro",
    # This box's own tables, found from any working directory.
    str(REPO / "docs/benchmark_results/oracle/vm-torch-smollm2-135m.yaml"),
    str(REPO / "docs/benchmark_results/oracle/vm-mlx-smollm2-135m.yaml"),
)
ORACLE_MAX_DRAFT = 32  # the widest any replayed policy drafts (calibrated's default)


def load_replies(db: str, matrix: str) -> list[dict]:
    """Each prompt's plain greedy reply: prompt and reply ids, stop reason, token limit."""
    from specfleet.report.predictions import stored_runs
    from specfleet.store.readonly import open_read_only

    with open_read_only(db) as store:  # a mistyped --db is refused, not made an empty store
        runs = [r for r in stored_runs(store, matrix) if r.arm == "plain"]
    return [{"prompt": r.prompt_name, "prompt_ids": list(r.prompt_token_ids),
             "reply": list(r.token_ids), "stop": r.stop_reason, "max_tokens": r.max_tokens}
            for r in sorted(runs, key=lambda r: r.prompt_name)]


def table_ratio(spec: str) -> tuple[str, tuple[float, ...], bool]:
    """(name, costs, whether the loop pipelines on the table's host: not torch on a CPU)."""
    from specfleet.report.predictions import load_cost_file, packaged_cost

    packaged = packaged_cost(spec)
    table = load_cost_file(packaged or Path(spec))
    return (spec if packaged else Path(spec).stem), table.ratio, table.pipelines is not False


def efficiencies(replies: list[dict], policies: list[Policy]) -> dict[tuple[str, str, str], float]:
    """(table, prompt, policy) -> oracle cost / policy cost."""
    out = {}
    for spec in TABLES:
        name, costs, pipeline = table_ratio(spec)
        for r in replies:
            bound = oracle(r["prompt_ids"], r["reply"], stop_reason=r["stop"],
                           max_tokens=r["max_tokens"],
                           lookup=PromptLookupConfig(max_draft=ORACLE_MAX_DRAFT), costs=costs)
            out[(name, r["prompt"], "ceiling")] = (
                replay(r["prompt_ids"], r["reply"], stop_reason=r["stop"],
                       max_tokens=r["max_tokens"], lookup=None, costs=costs,
                       pipeline=pipeline).cost_steps
                / bound.cost_steps)
            for policy in policies:
                lookup = PromptLookupConfig(max_draft=default_max_draft(policy), policy=policy,
                                            costs=costs)
                done = replay(r["prompt_ids"], r["reply"], stop_reason=r["stop"],
                              max_tokens=r["max_tokens"], lookup=lookup, costs=costs,
                              pipeline=pipeline)
                out[(name, r["prompt"], policy)] = bound.efficiency(done.cost_steps)
    return out


def summary(result: dict[tuple[str, str, str], float], prompts: list[str], policy: str) -> str:
    """Mean and lowest efficiency over the copy-heavy and the prose prompts, every table."""
    from bench.policies_prompts import kind_of

    out = []
    for kind in ("copy", "prose"):
        cells = [v for (t, p, pol), v in result.items() if pol == policy and p in prompts
                 and kind_of(p) == kind]
        if cells:
            out.append(f"{kind}: mean {statistics.mean(cells):.3f} lowest {min(cells):.2f} "
                       f"(n={len(cells)})")
    return "; ".join(out)


def markdown(result: dict[tuple[str, str, str], float], prompts: list[str], policy: str) -> str:
    lines = [f"| table | {' | '.join(prompts)} | median (lowest) |",
             "|---" * (len(prompts) + 2) + "|"]
    for name in dict.fromkeys(t for t, _, _ in result):
        cells = [result[(name, p, policy)] for p in prompts]
        fmt = "{:.2f}x" if policy == "ceiling" else "{:.2f}"
        lines.append(f"| {name} | " + " | ".join(fmt.format(c) for c in cells)
                     + f" | {statistics.median(cells):.2f} ({min(cells):.2f}) |")
    return "\n".join(lines)


def main() -> None:
    parser = BenchParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, action="append",
                        help="a store; repeat with --matrix for each")
    parser.add_argument("--matrix", required=True, action="append",
                        help="the matrix of plain replies read from the --db in the same place")
    parser.add_argument("--policies", default="calibrated", type=names_in(POLICY_NAMES),
                        help=f"comma list of {', '.join(POLICY_NAMES)} (default calibrated)")
    parser.add_argument("--json", help="also write every cell to this file")
    args = parser.parse_args()
    one_per(parser, "--matrix", args.matrix, "--db", args.db)
    replies = [r for db, matrix in zip(args.db, args.matrix, strict=True)
               for r in load_replies(db, matrix)]
    policies = [p for p in POLICY_NAMES if p in args.policies.split(",")]
    result = efficiencies(replies, policies)
    prompts = [r["prompt"] for r in replies]
    for policy in ("ceiling", *policies):
        title = "decode ceiling over plain" if policy == "ceiling" else f"{policy}: efficiency"
        print(f"\n{title}\n\n{markdown(result, prompts, policy)}")
        if policy != "ceiling":
            print(f"\n{summary(result, prompts, policy)}")
    if args.json:
        Path(args.json).write_text(json.dumps({"|".join(k): v for k, v in result.items()},
                                              indent=1))


if __name__ == "__main__":
    run_main(main)
