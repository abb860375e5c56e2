"""Does the rest of the context say how long a copy will hold? The n-gram index proposes the
continuation of the latest earlier occurrence of the context's suffix; the earlier
occurrences of the same n-gram either continue the same way (support) or not. This script
measures how often a proposal lands by that support, then replays `calibrated` with the
other occurrences counted as evidence in its hazards, against the oracle.

Replay only after the replies exist (seconds): the tuning and held-out prompts of
`bench/policies_prompts.py`, the bundled model's greedy plain replies (torch, chat template,
256-token limit), kept in a JSON file (`--generate` writes it first; ~10 min on 2 cores):

    .venv/bin/python bench/occurrence_support.py --replies /tmp/replies.json --generate
    .venv/bin/python bench/occurrence_support.py --replies /tmp/replies.json --weights 1,2,4

The variants (docs/benchmark_results/policy-variants-2026-12-03.md, "Occurrence support"):
- `size`: `size` multiplies each proposal's hazard by the other occurrences' evidence, a
  Beta update of the policy's own (decayed counts + prior) by `weight` pseudo-proposals per
  other occurrence that agreed through that proposal (landed) or broke there (missed);
- `size+paused`: as `size`, and a paused round also looks the full match up and drafts it
  at once when at least one other occurrence agrees on its first token and the supported
  draft scores above plain (instead of waiting for a shadow probe to confirm it);
- `sticky` (not about support: the other way to stay on a copy): after a round whose draft
  landed whole and whose bonus token matched the source, the next proposal continues the
  same source span instead of the latest occurrence of the context's suffix.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import sys
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import specfleet.engine.calibrated as cal  # noqa: E402
import specfleet.engine.loop as loop  # noqa: E402
from bench.cli_args import BenchParser, numbers_at_least_zero, run_main  # noqa: E402
from bench.policies_oracle import ORACLE_MAX_DRAFT, TABLES, table_ratio  # noqa: E402
from bench.policies_prompts import (  # noqa: E402
    COPY_HEAVY,
    HELD_OUT_COPY_HEAVY,
    HELD_OUT_DIR,
    HELD_OUT_PROSE,
    OWN_PROMPTS,
    PROSE,
)
from specfleet.engine.config import PromptLookupConfig  # noqa: E402
from specfleet.engine.lookup import NgramIndex, cycle_out  # noqa: E402
from specfleet.engine.oracle import landed_count, oracle  # noqa: E402
from specfleet.engine.predict import replay  # noqa: E402

MAX_TOKENS = 256
MAX_OTHERS = 8  # the latest earlier occurrences read (a loop has hundreds)


def generate_replies(path: Path) -> None:
    """The bundled model's greedy plain replies to every tuning and held-out prompt."""
    from specfleet.cli.localmodel import load_model
    from specfleet.configs import prompts_dir
    from specfleet.engine.loop import generate

    runner = load_model("smollm2-135m", "torch", "cpu").runner
    out = {}
    sets = (("tuning", COPY_HEAVY, PROSE), ("heldout", HELD_OUT_COPY_HEAVY, HELD_OUT_PROSE))
    for group, copy, prose in sets:
        for name in (*copy, *prose):
            text = (OWN_PROMPTS.get(name) or (
                (HELD_OUT_DIR / f"{name}.txt") if group == "heldout"
                else prompts_dir() / f"{name}.txt").read_text())
            ids = runner.encode_prompt(text, chat=True)
            reply = generate(runner, ids, max_tokens=MAX_TOKENS)
            out[name] = {"group": group, "kind": "copy" if name in copy else "prose",
                         "prompt": list(ids), "reply": list(reply.tokens),
                         "stop": reply.stop_reason}
            print(name, len(reply.tokens), reply.stop_reason, flush=True)
    path.write_text(json.dumps(out))


class SupportIndex(NgramIndex):
    """The shipped index, also keeping every start of each n-gram; `match` leaves the
    other occurrences' evidence on the proposal in `last`: per proposal position, how many
    agreed through it and how many agreed up to it and broke there."""

    last: tuple[list[int], list[int]] | None = None

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        super().__init__(ngram_min, ngram_max)
        self._starts: dict[int, dict[tuple[int, ...], list[int]]] = {
            n: defaultdict(list) for n in range(ngram_min, ngram_max + 1)}

    def extend(self, context: Sequence[int]) -> None:
        for end in range(max(self.indexed_len - 1, 0), len(context) - 1):
            for n in range(self.ngram_min, self.ngram_max + 1):
                if end + 1 >= n:
                    self._starts[n][tuple(context[end - n + 1 : end + 1])].append(end - n + 1)
        super().extend(context)

    def match(self, context: Sequence[int], max_draft: int,
              cyclic: bool = False) -> tuple[list[int], int]:
        proposal, n = super().match(context, max_draft, cyclic)
        SupportIndex.last = None
        if proposal:
            starts = self._starts[n][tuple(context[len(context) - n :])]
            SupportIndex.last = support(context, proposal, n, starts[-1 - MAX_OTHERS : -1])
        return proposal, n


def support(context: Sequence[int], proposal: Sequence[int], n: int,
            others: Sequence[int]) -> tuple[list[int], list[int]]:
    """Per proposal position: the other occurrences agreeing through it, and breaking at it."""
    agree, broke = [0] * len(proposal), [0] * len(proposal)
    for start in others:
        for j, token in enumerate(proposal):
            at = start + n + j
            if at >= len(context):
                break
            if context[at] != token:
                broke[j] += 1
                break
            agree[j] += 1
    return agree, broke


def landing_table(replies: dict) -> None:
    """How often a proposal's first token lands, by what the other occurrences say."""
    counts: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0])
    for r in replies.values():
        prompt, reply = r["prompt"], r["reply"]
        index = SupportIndex(2, 3)
        for i in range(len(reply) - 1):
            context = [*prompt, *reply[: i + 1]]
            index.extend(context)
            proposal, _ = index.match(context, ORACLE_MAX_DRAFT)
            if not proposal or SupportIndex.last is None:
                continue
            agree, broke = SupportIndex.last
            others = agree[0] + broke[0]
            label = ("no other occurrence" if others == 0 else "all others agree"
                     if broke[0] == 0 else "most others agree" if agree[0] >= broke[0]
                     else "most others differ")
            cell = counts[(r["group"], r["kind"], label)]
            cell[0] += 1
            cell[1] += landed_count(proposal, reply, i + 1) > 0
    print("| set | kind | the other occurrences of the matched n-gram | lookups | first token "
          "lands |\n|---|---|---|---|---|")
    for (group, kind, label), (tried, landed) in sorted(counts.items()):
        print(f"| {group} | {kind} | {label} | {tried} | {landed / tried:.2f} |")


def supported_survival(governor: cal.CalibratedGovernor, most: int,
                       weight: float) -> list[float]:
    """`cal.survival` with each hazard updated by the other occurrences' evidence."""
    agree, broke = SupportIndex.last or ([], [])
    out, alive = [], 1.0
    for j in range(most):
        bucket = cal.depth_bucket(governor.run + j)
        held = governor.landed[bucket] + cal.PRIOR_WEIGHT * cal.prior_hazard(bucket)
        seen = governor.tried[bucket] + cal.PRIOR_WEIGHT
        a, b = (agree[j], broke[j]) if j < len(agree) else (0, 0)
        alive *= (held + weight * a) / (seen + weight * (a + b))
        out.append(alive)
    return out


class StickyIndex(NgramIndex):
    """The shipped index plus the source position the next proposal would continue."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        super().__init__(ngram_min, ngram_max)
        self.pointer: int | None = None

    def source(self, context: Sequence[int]) -> int | None:
        """Where the index's proposal starts in the context (None: no match)."""
        for n in range(min(self.ngram_max, max(len(context) - 1, 0)), self.ngram_min - 1, -1):
            start = self._maps[n].get(tuple(context[len(context) - n :]))
            if start is not None:
                return start + n
        return None


def sticky_look_up(governor, index, context, budget, shadow):
    """`loop._look_up` that continues the last draft's source span while it still aligns
    with the context's last two tokens."""
    if budget == 0 or index is None:
        return SHIPPED_LOOK_UP(governor, index, context, budget, shadow)
    index.extend(context)
    src = index.pointer
    if src is not None and 2 <= src < len(context) and context[src - 2 : src] == context[-2:]:
        proposal, ngram = list(context[src : src + budget]), 2
        if governor.cycles:  # as the index's own proposal: a span cut short by the end of a loop
            proposal = cycle_out(context, proposal, budget)
    else:
        proposal, ngram = index.match(context, budget, governor.cycles)
        src = index.source(context)
        if src is not None and proposal != list(context[src : src + len(proposal)]):
            src = None  # a cycled-out proposal has no single source
    k = governor.size(proposal, ngram)
    index.pointer = src + k + 1 if src is not None and k else None
    return proposal[:k], shadow


SHIPPED_LOOK_UP = loop._look_up


@contextlib.contextmanager
def variant(name: str, weight: float) -> Iterator[None]:
    """Patch calibrated (and, for size+paused, the paused round's lookup); put both back."""
    shipped_size, shipped_look_up, shipped_index = (
        cal.CalibratedGovernor.size, loop._look_up, loop.NgramIndex)

    def size(self, proposal, ngram):
        if not proposal or SupportIndex.last is None:
            return shipped_size(self, proposal, ngram)
        return cal.saving_draft(supported_survival(self, len(proposal), weight), self.costs,
                                self.refeeds)

    def look_up(governor, index, context, budget, shadow):
        if budget == 0 and isinstance(governor, cal.CalibratedGovernor) and index is not None:
            index.extend(context)
            proposal, ngram = index.match(context, governor.max_draft, governor.cycles)
            if proposal and SupportIndex.last and SupportIndex.last[0][0] > 0:
                k = cal.saving_draft(supported_survival(governor, len(proposal), weight),
                                     governor.costs, governor.refeeds)
                if k:
                    return proposal[:k], shadow
        return shipped_look_up(governor, index, context, budget, shadow)

    if name == "sticky":
        loop.NgramIndex, loop._look_up = StickyIndex, sticky_look_up
    elif name != "shipped":
        loop.NgramIndex = SupportIndex
        cal.CalibratedGovernor.size = size
        if name == "size+paused":
            loop._look_up = look_up
    try:
        yield
    finally:
        cal.CalibratedGovernor.size, loop._look_up, loop.NgramIndex = (
            shipped_size, shipped_look_up, shipped_index)


def replayed(replies: dict) -> dict[tuple[str, str], tuple[float, float]]:
    """(table, prompt) -> (efficiency against the oracle, speed-up over plain), decode loop."""
    out = {}
    for spec in TABLES:
        table, costs, pipeline = table_ratio(spec)
        for name, r in replies.items():
            args = dict(stop_reason=r["stop"], max_tokens=MAX_TOKENS, costs=costs)
            bound = oracle(r["prompt"], r["reply"],
                           lookup=PromptLookupConfig(max_draft=ORACLE_MAX_DRAFT), **args)
            plain = replay(r["prompt"], r["reply"], lookup=None, pipeline=pipeline,
                           **args).cost_steps
            lookup = PromptLookupConfig(max_draft=ORACLE_MAX_DRAFT, policy="calibrated",
                                        costs=costs)
            cost = replay(r["prompt"], r["reply"], lookup=lookup, pipeline=pipeline,
                          **args).cost_steps
            out[(table, name)] = (bound.cost_steps / cost, plain / cost)
    return out


def main() -> None:
    parser = BenchParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    parser.add_argument("--replies", type=Path, required=True,
                        help="JSON file of the greedy plain replies (written by --generate)")
    parser.add_argument("--generate", action="store_true", help="write the replies first")
    parser.add_argument("--weights", default="2", type=numbers_at_least_zero,
                        help="comma list of pseudo-proposals per occurrence, each >= 0 (default 2)")
    args = parser.parse_args()
    if not args.generate and not args.replies.is_file():
        parser.error(f"argument --replies: no file {args.replies}; expected the JSON file "
                     "--generate writes")
    if args.generate:
        generate_replies(args.replies)
    replies = json.loads(args.replies.read_text())
    landing_table(replies)
    print("\n| variant | weight | tuning copy | tuning prose | held-out copy | held-out prose |"
          "\n|---|---|---|---|---|---|")
    runs = [("shipped", 0.0)] + [(name, float(w)) for name in ("size", "size+paused")
                                 for w in args.weights] + [("sticky", 0.0)]
    for name, weight in runs:
        with variant(name, weight):
            result = replayed(replies)
        shown = weight if name.startswith("size") else "–"
        print(f"| {name} | {shown} | {' | '.join(set_cells(replies, result))} |")


def set_cells(replies: dict, result: dict[tuple[str, str], tuple[float, float]],
              geomean: bool = False) -> list[str]:
    """Per set (tuning copy, tuning prose, held-out copy, held-out prose): mean efficiency,
    the worst speed-up over plain in brackets (and the geometric-mean speed-up)."""
    cells = []
    for group in ("tuning", "heldout"):
        for kind in ("copy", "prose"):
            keys = [k for k in result
                    if (replies[k[1]]["group"], replies[k[1]]["kind"]) == (group, kind)]
            cell = (f"{statistics.mean(result[k][0] for k in keys):.3f} "
                    f"({min(result[k][1] for k in keys):.3f})")
            if geomean:
                cell += f" {statistics.geometric_mean(result[k][1] for k in keys):.3f}x"
            cells.append(cell)
    return cells


if __name__ == "__main__":
    run_main(main)
