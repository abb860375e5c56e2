"""The policy benchmark's markdown record: tables, targets and the replay's predictions."""

from __future__ import annotations

from bench.policies_prompts import COPY_HEAVY, PROSE

FOREIGN = ("gb10-qwen3-1.7b", "gb10-qwen3-8b", "apple-m4pro")
POLICIES = ("graded", "gated", "calibrated")


def _table(data) -> list[str]:
    t = data["table"]
    flagged = f" (not monotone at {t['flagged']})" if t["flagged"] else ""
    pick = [1, 2, 3, 4, 8, 12, 16, 24, 33]
    cells = " ".join(f"w{w}={t['ratio'][w - 1]:.2f} [{t['lo'][w - 1]:.2f}-{t['hi'][w - 1]:.2f}]"
                     for w in pick if w <= len(t["ratio"]))
    return [f"Width costs ({data['engine']}, quick calibration, n={t['n']}, "
            f"{data['calibrate_s']:.0f} s){flagged}: {cells}", ""]


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
        cells = " | ".join(f"{ratio[a]:.2f}x ±{spread(data, a, prompt) * 50:.0f}%" for a in arms)
        lines.append(f"| {prompt} | {kind} | {plain:.1f} | {cells} | "
                     f"{errors['calibrated'] * 100:+.1f}% |")
        misses += _misses(data["engine"], prompt, kind, ratio)
    return lines, misses


def answered(data) -> list[str]:
    """The prompts whose plain replies hold tokens: a base model (Gemma 3 270M) can stop at
    once, and an empty reply has no rate to compare."""
    return [prompt for prompt, runs in data["arms"]["plain"].items()
            if all(run["tokens"] for run in runs)]


def _misses(engine, prompt, kind, ratio) -> list[str]:
    out = []
    cal = ratio["calibrated"]
    if kind == "copy" and "hf_lookup10" in ratio and cal < ratio["hf_lookup10"]:
        out.append(f"{engine} {prompt}: calibrated {cal:.2f}x < transformers lookup "
                   f"{ratio['hf_lookup10']:.2f}x")
    if kind == "prose" and cal < 0.99:
        out.append(f"{engine} {prompt}: calibrated {cal:.2f}x < 0.99x plain")
    best = max(ratio["graded"], ratio["gated"])
    out.append(f"ok {engine} {prompt}" if cal >= best else
               f"below {engine} {prompt}: calibrated {cal:.2f}x < best of graded/gated {best:.2f}x")
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
           "whole-call tok/s over specfleet plain of the same engine; ± is half the "
           "max-min spread over the median).", "",
           "Environment: " + ", ".join(f"{k}={v}" for k, v in env.items()), "",
           load_verdict(env), ""]
    all_misses = []
    for data in results:
        out += [f"## {data['engine']} ({data['model']})", ""] + _table(data)
        lines, misses = _speed_table(data, median_rate, spread, predictions)
        out += lines + [""]
        all_misses += misses
    below = [m for m in all_misses if m.startswith("below ")]
    ok = [m for m in all_misses if m.startswith("ok ")]
    share = len(ok) / max(len(ok) + len(below), 1)
    out += ["## Targets", "",
            "- calibrated >= 1.0x transformers' prompt lookup on every copy-heavy prompt (torch)",
            "- calibrated >= 0.99x plain on every prose prompt (torch, MLX fp32, MLX 4-bit)",
            f"- calibrated >= the better of graded and gated on >= 80% of cells: "
            f"{len(ok)}/{len(ok) + len(below)} = {share:.0%}", "",
            "Misses:", ""]
    out += [f"- {m.removeprefix('below ')}" for m in all_misses if not m.startswith("ok ")]
    out += [] if any(not m.startswith("ok ") for m in all_misses) else ["- none"]
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
