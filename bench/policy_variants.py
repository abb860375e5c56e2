"""Variants of `calibrated`'s draft rule replayed against the oracle: what each does to the
mean efficiency and to the worst decode speed-up over plain, copy-heavy and prose apart.

Replay only (no model; seconds), over stored greedy plain replies and the seven tables of
`bench/policies_oracle.py`. Each variant patches one piece of the shipped policy for the
replay and puts it back (a variant of the length rule replaces the whole rule, the shipped
expected-loss term included); docs/benchmark_results/policy-variants-2026-12-03.md says
which was kept and why.

    .venv/bin/python bench/policy_variants.py --set tuning --db /tmp/or/oracle.db \
        --matrix bench-37cb77 --set tuning --db /tmp/or/own.db --matrix bench-afdc9d \
        --set heldout --db /tmp/or/heldout.db --matrix bench-b1603c
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import specfleet.engine.calibrated as cal  # noqa: E402
from bench.policies_oracle import ORACLE_MAX_DRAFT, TABLES, load_replies, table_ratio  # noqa: E402
from bench.policies_prompts import kind_of  # noqa: E402
from specfleet.engine.config import PromptLookupConfig  # noqa: E402
from specfleet.engine.oracle import oracle  # noqa: E402
from specfleet.engine.predict import replay  # noqa: E402

Governor = cal.CalibratedGovernor


@contextlib.contextmanager
def patched(owner: object, name: str, value: object) -> Iterator[None]:
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def depth0_prior(p0: float) -> contextlib.AbstractContextManager[None]:
    """A fresh match's first proposal lands with prior mean `p0` (shipped: 1/2)."""
    shipped = cal.prior_hazard
    return patched(cal, "prior_hazard", lambda bucket: p0 if bucket == 0 else shipped(bucket))


def confirm_fresh(behind_by: float | None) -> contextlib.AbstractContextManager[None]:
    """A fresh match is drafted only once a shadow probe confirmed it (run 2): always
    (`behind_by` None), or while the drafts so far saved less than -`behind_by` steps."""
    budget, record = Governor.budget, Governor.record

    def new_budget(self) -> int:
        realized = getattr(self, "realized", 0.0)
        if self.run == 0 and (behind_by is None or realized < -behind_by):
            self.paused = True
            return 0
        return budget(self)

    def new_record(self, accepted: int, proposed: int) -> None:
        self.realized = (getattr(self, "realized", 0.0) + accepted + 1
                         - cal.width_cost(self.costs, proposed + 1))
        record(self, accepted, proposed)

    stack = contextlib.ExitStack()
    stack.enter_context(patched(Governor, "budget", new_budget))
    stack.enter_context(patched(Governor, "record", new_record))
    return stack


def mean_variance(weight: float) -> contextlib.AbstractContextManager[None]:
    """The draft maximizing expected saving less `weight` x the variance of tokens landed."""

    def saving(alive: Sequence[float], costs: Sequence[float], refeeds: bool = False) -> int:
        best_k, best, landed, pairs = 0, 0.0, 0.0, 0.0
        for k in range(1, len(alive) + 1):
            landed += alive[k - 1]
            pairs += (k - 1) * alive[k - 1]  # sum over i < j of S(j)
            variance = landed + 2 * pairs - landed * landed
            cost = cal.width_cost(costs, k + 1)
            if refeeds:
                cost += cal.expected_refeed_cost(alive[:k], costs)
            score = 1.0 + landed - cost - weight * variance
            if score > best + 1e-12:
                best_k, best = k, score
        return best_k

    return patched(cal, "saving_draft", saving)


def expected_loss(weight: float) -> contextlib.AbstractContextManager[None]:
    """The draft maximizing expected saving less `weight` x its expected loss against plain
    decoding (E[max(0, cost(k + 1) - 1 - landed)]: only the rounds that cost more than the
    plain steps they replace)."""

    def saving(alive: Sequence[float], costs: Sequence[float], refeeds: bool = False) -> int:
        best_k, best, landed = 0, 0.0, 0.0
        for k in range(1, len(alive) + 1):
            landed += alive[k - 1]
            cost = cal.width_cost(costs, k + 1)
            if refeeds:
                cost += cal.expected_refeed_cost(alive[:k], costs)
            before = [1.0, *alive[:k], 0.0]
            loss = sum((before[a] - before[a + 1]) * max(0.0, cost - 1.0 - a)
                       for a in range(k + 1))
            score = 1.0 + landed - cost - weight * loss
            if score > best + 1e-12:
                best_k, best = k, score
        return best_k

    return patched(cal, "saving_draft", saving)


VARIANTS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "shipped (expected loss 0.5)": contextlib.nullcontext,
    "expected saving only (before)": lambda: expected_loss(0.0),
    "fresh prior 1/3": lambda: depth0_prior(1 / 3),
    "fresh prior 1/4": lambda: depth0_prior(1 / 4),
    "confirm every fresh match": lambda: confirm_fresh(None),
    "confirm when behind by 1 step": lambda: confirm_fresh(1.0),
    "mean-variance 0.02": lambda: mean_variance(0.02),
    "mean-variance 0.05": lambda: mean_variance(0.05),
    "mean-variance 0.1": lambda: mean_variance(0.1),
    "expected loss 0.25": lambda: expected_loss(0.25),
    "expected loss 1": lambda: expected_loss(1.0),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, help="the set a store joins")
    parser.add_argument("--db", action="append", required=True)
    parser.add_argument("--matrix", action="append", required=True)
    args = parser.parse_args()
    replies = [(name, reply) for name, db, matrix in zip(args.set, args.db, args.matrix, strict=True)
               for reply in load_replies(db, matrix)]
    tables = [table_ratio(spec) for spec in TABLES]
    bounds = {}
    for name, r in replies:
        for table, costs in tables:
            kwargs = {"stop_reason": r["stop"], "max_tokens": r["max_tokens"], "costs": costs}
            bound = oracle(r["prompt_ids"], r["reply"],
                           lookup=PromptLookupConfig(max_draft=ORACLE_MAX_DRAFT), **kwargs)
            plain = replay(r["prompt_ids"], r["reply"], lookup=None, **kwargs).cost_steps
            bounds[(name, r["prompt"], table)] = (bound, plain)
    groups = [(s, kind) for s in dict.fromkeys(args.set) for kind in ("copy", "prose")]
    print("| variant | " + " | ".join(f"{s} {k}: mean efficiency (worst speed-up)"
                                      for s, k in groups) + " |")
    print("|---" * (len(groups) + 1) + "|")
    for label, variant in VARIANTS.items():
        cells: dict[tuple[str, str], list[tuple[float, float]]] = {g: [] for g in groups}
        with variant():
            for name, r in replies:
                for table, costs in tables:
                    lookup = PromptLookupConfig(max_draft=32, policy="calibrated", costs=costs)
                    done = replay(r["prompt_ids"], r["reply"], stop_reason=r["stop"],
                                  max_tokens=r["max_tokens"], lookup=lookup, costs=costs)
                    bound, plain = bounds[(name, r["prompt"], table)]
                    cells[(name, kind_of(r["prompt"]))].append(
                        (bound.efficiency(done.cost_steps), plain / done.cost_steps))
        row = [f"{statistics.mean(e for e, _ in cells[g]):.3f} ({min(s for _, s in cells[g]):.3f})"
               for g in groups]
        print(f"| {label} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
