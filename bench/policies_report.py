"""The policy benchmark's markdown record: tables, targets and the replay's predictions.

Each target is judged by the project's interval rule (`specfleet.stats.interval`) on the
repeats of both sides, never on their medians alone: with three identical policies the
medians alone put calibrated under the better of the other two in two cells of three.
"""

from __future__ import annotations

import statistics

from bench.policies_prompts import COPY_HEAVY, PROSE
from specfleet.stats.interval import CONFIDENCE, MIN_REPEATS, no_verdict_text, ratio_interval

FOREIGN = ("gb10-qwen3-1.7b", "gb10-qwen3-8b", "apple-m4pro")
POLICIES = ("graded", "gated", "calibrated")


def _table(data) -> list[str]:
    t = data["table"]
    flagged = (f" (not monotone at {t['flagged']}, judged on the re-measure's own rounds)"
               if t["flagged"] else "")
    pick = [1, 2, 3, 4, 8, 12, 16, 24, 33]
    cells = " ".join(f"w{w}={t['ratio'][w - 1]:.2f} [{t['lo'][w - 1]:.2f}-{t['hi'][w - 1]:.2f}]"
                     for w in pick if w <= len(t["ratio"]))
    return [f"Width costs ({data['engine']}, quick calibration, n={t['n']} rounds, "
            f"{data['calibrate_s']:.0f} s; median [lowest-highest round], a range, not an "
            f"interval){flagged}: {cells}", ""]


def _speed_table(data, median_rate, spread, predictions) -> tuple[list[str], list[str]]:
    from specfleet.engine.widthcosts import WidthCosts  # noqa: F401 (engine importable)

    arms = [a for a in data["arms"] if a != "plain"]
    head = "| prompt | kind | plain tok/s | " + " | ".join(arms) + " | replay error (calibrated) |"
    lines = [head, "|" + "---|" * (len(arms) + 4)]
    misses = []
    for prompt in data["arms"]["plain"]:
        if prompt not in answered(data):
            lines.append(f"| {prompt} | - | 0 | empty replies: the model stopped at once |")
            continue
        plain = median_rate(data, "plain", prompt)
        kind = "copy" if prompt in COPY_HEAVY else "prose" if prompt in PROSE else "-"
        ratio = {a: median_rate(data, a, prompt) / plain for a in arms}
        predicted = predictions(data, prompt, data["table"]["ratio"], True, data["pipelines"])
        errors = {p: (predicted[p] - ratio[p]) / ratio[p] for p in POLICIES}
        cells = " | ".join(f"{ratio[a]:.2f}x ±{spread(data, a, prompt) * 100:.0f}%" for a in arms)
        lines.append(f"| {prompt} | {kind} | {plain:.1f} | {cells} | "
                     f"{errors['calibrated'] * 100:+.1f}% |")
        misses += _misses(data["engine"], prompt, kind, _rates(data, prompt, median_rate))
    return lines, misses


def _rates(data, prompt, median_rate) -> dict[str, list[float]]:
    """Each arm's tok/s per repeat on `prompt`: `median_rate` (the bench's one definition of
    a repeat's rate) over one repeat at a time."""
    return {arm: [median_rate({"arms": {arm: {prompt: [run]}}}, arm, prompt)
                  for run in by_prompt[prompt]]
            for arm, by_prompt in data["arms"].items()}


def answered(data) -> list[str]:
    """The prompts whose plain replies hold tokens: a base model (Gemma 3 270M) can stop at
    once, and an empty reply has no rate to compare."""
    return [prompt for prompt, runs in data["arms"]["plain"].items()
            if all(run["tokens"] for run in runs)]


def _judged(base: list[float], other: list[float], floor: float = 1.0) -> tuple[str, str]:
    """Whether median(other) / median(base) lies below `floor` by the interval rule: "below"
    when its whole interval does (at 1x, the rule's loss), else "not below"; "no verdict"
    without an interval (too few repeats, or one without a rate). With the interval as text."""
    interval = ratio_interval(base, other)
    if interval is None:
        return "no verdict", no_verdict_text(min(len(base), len(other)))
    text = f"{CONFIDENCE:.0%} interval {interval.low:.2f}-{interval.high:.2f}x"
    return ("below" if interval.high < floor else "not below"), text


def _misses(engine, prompt, kind, rates) -> list[str]:
    """One prompt's targets judged on `rates` (tok/s per repeat by arm, plain included): each
    miss in words; the graded/gated target's outcome as "ok ...", "below ..." (a miss) or
    "unjudged ..."; any other target without a verdict as "unjudged ..."."""
    where, cal = f"{engine} {prompt}", rates["calibrated"]
    ratio = {arm: statistics.median(r) / statistics.median(rates["plain"])
             for arm, r in rates.items()}
    checks = []
    if kind == "copy" and "hf_lookup10" in rates:
        checks.append(("hf_lookup10", 1.0, f"transformers lookup {ratio['hf_lookup10']:.2f}x"))
    if kind == "prose":
        checks.append(("plain", 0.99, "0.99x plain"))
    out = []
    for base, floor, name in checks:
        verdict, text = _judged(rates[base], cal, floor)
        if verdict == "below":
            out.append(f"{where}: calibrated {ratio['calibrated']:.2f}x below {name} "
                       f"(calibrated / {base}: {text}, wholly below {floor:.2f}x)")
        elif verdict == "no verdict":
            out.append(f"unjudged {where}: calibrated against {name} ({text})")
    best = max(("graded", "gated"), key=lambda arm: ratio[arm])
    verdict, text = _judged(rates[best], cal)
    out.append({"not below": f"ok {where}",
                "below": f"below {where}: calibrated {ratio['calibrated']:.2f}x below {best} "
                         f"{ratio[best]:.2f}x (calibrated / {best}: {text}, wholly below 1x)",
                "no verdict": f"unjudged {where}: calibrated against {best} ({text})"}[verdict])
    return out


def _targets(all_misses: list[str]) -> list[str]:
    """The targets, the graded/gated share, the misses and the cells without a verdict."""
    below = [m for m in all_misses if m.startswith("below ")]
    ok = [m for m in all_misses if m.startswith("ok ")]
    unjudged = [m.removeprefix("unjudged ") for m in all_misses if m.startswith("unjudged ")]
    misses = [m.removeprefix("below ") for m in all_misses
              if not m.startswith(("ok ", "unjudged "))]
    share = len(ok) / max(len(ok) + len(below), 1)
    out = ["## Targets", "",
           f"Each judged by the interval rule (docs/trust.md) on the repeats of both sides: a "
           f"cell misses only when the {CONFIDENCE:.0%} interval on the ratio of medians lies "
           "wholly below the target, not when the medians alone fall short; under "
           f"{MIN_REPEATS} repeats a side it has no verdict and counts as neither.", "",
           "- calibrated not below transformers' prompt lookup on any copy-heavy prompt "
           "(torch): the interval on calibrated / lookup not wholly below 1x",
           "- calibrated not below 0.99x plain on any prose prompt (torch, MLX fp32, MLX "
           "4-bit): the interval on calibrated / plain not wholly below 0.99x",
           "- calibrated not below the better (by median) of graded and gated on >= 80% of "
           "cells: the interval on calibrated / that policy not wholly below 1x: "
           f"{len(ok)}/{len(ok) + len(below)} cells with a verdict = {share:.0%}", "",
           "Misses:", ""]
    out += [f"- {m}" for m in misses] or ["- none"]
    if unjudged:
        out += ["", "Without a verdict:", "", *(f"- {m}" for m in unjudged)]
    return out


def _foreign(results, predictions) -> list[str]:
    from specfleet.report.predictions import load_cost_file, packaged_cost

    lines = ["| engine | prompt | " + " | ".join(
        f"{name} {p}" for name in FOREIGN for p in POLICIES) + " |",
        "|" + "---|" * (2 + len(FOREIGN) * len(POLICIES))]
    for data in results:
        for prompt in answered(data):
            cells = []
            for name in FOREIGN:
                costs = load_cost_file(packaged_cost(name)).ratio
                pred = predictions(data, prompt, costs, False)
                cells += [f"{pred[p]:.2f}x" for p in POLICIES]
            lines.append(f"| {data['engine']} | {prompt} | " + " | ".join(cells) + " |")
    return lines


# Over this many runnable processes per core (1-minute load average) the timings are shared.
BUSY_LOAD_PER_CORE = 0.5


def load_verdict(env: dict) -> str:
    """One line on how quiet the machine was when the run began (the load after it includes
    the bench's own processes, so only the load before judges the neighbours)."""
    cpus = int(env.get("cpus") or 1)
    if "load_before" not in env:
        return "Load was not recorded."
    before = float(env["load_before"].split()[0])
    if before > BUSY_LOAD_PER_CORE * cpus:
        return (f"**The machine was busy when this began (1-minute load {before:.2f} on {cpus} "
                "cores): every figure is noisy.**")
    return (f"The machine was quiet when this began (1-minute load {before:.2f} on {cpus} "
            "cores); the load after includes this bench's own processes.")


def _efficiency(results, efficiencies) -> list[str]:
    lines = ["| engine | prompt | oracle ceiling (decode) | " + " | ".join(POLICIES) + " |",
             "|" + "---|" * (3 + len(POLICIES))]
    for data in results:
        for prompt in answered(data):
            eff = efficiencies(data, prompt, data["table"]["ratio"], data["pipelines"])
            cells = " | ".join(f"{eff[p]:.2f}" for p in POLICIES)
            lines.append(f"| {data['engine']} | {prompt} | {eff['ceiling']:.2f}x | {cells} |")
    return lines


def render_markdown(results, env, command, args, predictions, median_rate, spread,
                    efficiencies) -> str:
    out = ["# Drafting policies: plain, graded, gated, calibrated (and transformers' lookup)", "",
           f"Command: `{command}` ({args.repeats} repeats, median; {args.tokens} new tokens; "
           "whole-call tok/s over specfleet plain of the same engine; ± is the arm's whole "
           "max-min range over its median, as in the matrix tables).", "",
           "Environment: " + ", ".join(f"{k}={v}" for k, v in env.items()), "",
           load_verdict(env), ""]
    all_misses = []
    for data in results:
        out += [f"## {data['engine']} ({data['model']})", ""] + _table(data)
        lines, misses = _speed_table(data, median_rate, spread, predictions)
        out += lines + [""]
        all_misses += misses
    out += _targets(all_misses)
    out += ["", "## The replay's predictions under other hosts' tables (decode loop only)", "",
            "From each prompt's plain reply above; GB10 tables are spec 7.6's; the Apple "
            "Silicon table is spec 7.8's one figure (width 8 = 2.5 steps) interpolated.", ""]
    out += _foreign(results, predictions)
    out += ["", "## Efficiency against the oracle bound (each engine's own table)", "",
            "From each prompt's plain reply: the oracle is the cheapest schedule over the same "
            "n-gram index (drafts up to 32) under the engine's measured table, pipeline "
            "mechanics unpaid; a policy's efficiency is oracle cost / its replayed cost "
            "(decode loop), the ceiling the oracle's decode speed-up over plain.", ""]
    out += _efficiency(results, efficiencies)
    return "\n".join(out) + "\n"
