"""Seed a real store with real toy-engine runs (a real HostWorker), then set the tok/s (and,
where a test needs a divergence, one token) to known values so speed-ups are exact."""

from __future__ import annotations

from dataclasses import dataclass

from specfleet.jobs.run import RunSpec, Target
from tests.store.factory import grid, result

H1 = Target(host="h1", engine="toy", device="cpu")
H2 = Target(host="h2", engine="toy", device="cpu")
PROMPTS = {"copy": "hello world hello world", "echo": "the cat sat on the mat"}
PLAIN_RATES = [100.0, 101.0, 99.0]  # median 100, spread 2%


@dataclass(frozen=True)
class Seed:
    """One cell: its repeats' tok/s, and optionally token `row` replaced by `token`."""

    target: Target
    model: str
    prompt: str
    arm: str
    rates: tuple[float, ...]
    patch: tuple[int, int] | None = None
    prompt_text: str | None = None
    max_tokens: int = 16


def seed_matrix(store, worker, name: str, seeds: list[Seed], matrix_id: str) -> str:
    """Create a matrix of `seeds`, run each repeat on the toy engine, store the results."""
    specs, plan = [], []
    for seed in seeds:
        for repeat, rate in enumerate(seed.rates):
            spec = RunSpec(
                run_key=f"{matrix_id}/{seed.target.label}/{seed.model}/{seed.prompt}/"
                f"{seed.arm}/{repeat}",
                matrix_id=matrix_id, target=seed.target, model=seed.model,
                prompt_name=seed.prompt, prompt_text=seed.prompt_text or PROMPTS[seed.prompt],
                arm=seed.arm, repeat=repeat, max_tokens=seed.max_tokens,
            )
            specs.append(spec)
            plan.append((spec, rate, seed.patch))
    store.create_matrix(name, {"name": name}, specs, matrix_id=matrix_id)
    for spec, rate, patch in plan:
        result = worker.run(spec)
        update: dict = {"tok_per_s": rate}
        if patch is not None:
            tokens = list(result.token_ids)
            tokens[patch[0]] = patch[1]
            update.update(token_ids=tokens, output_text=bytes(tokens).decode(errors="replace"))
        store.record_result(result.model_copy(update=update))
    store.finish_matrix(matrix_id, "done")
    return matrix_id


def demo_seeds() -> list[Seed]:
    """Two targets, two prompts, plain / graded / gated, and one looping model.

    h1 copy: graded 1.50x (a gain), gated 1.005x (within noise: interval 0.99-1.02x).
    h1 echo: gated spread 20% (flagged). h2 copy: graded diverges at token 5 (suspect).
    h2 echo: every arm carries the same changed token 3, so plain disagrees across targets.
    constant (h1 copy): replies loop; graded 4.00x kept out of the headline.
    """
    seeds = []
    for target in (H1, H2):
        for prompt in PROMPTS:
            patch = (3, ord("X")) if (target, prompt) == (H2, "echo") else None
            seeds += [
                Seed(target, "script", prompt, "plain", tuple(PLAIN_RATES), patch),
                Seed(target, "script", prompt, "graded", (150.0, 152.0, 148.0),
                     (5, ord("Z")) if (target, prompt) == (H2, "copy") else patch),
                Seed(target, "script", prompt, "gated",
                     (90.0, 100.0, 110.0) if prompt == "echo" else (100.5, 101.0, 100.0), patch),
            ]
    seeds += [
        Seed(H1, "constant", "copy", "plain", (50.0, 50.0, 50.0)),
        Seed(H1, "constant", "copy", "graded", (200.0, 200.0, 200.0)),
    ]
    return seeds


def after_seeds() -> list[Seed]:
    """The demo a code change later: h1 copy graded slower (1.20x), h1 copy gated now
    diverges (a regression against the demo), h2 copy graded identical again."""
    out = []
    for seed in demo_seeds():
        if (seed.target, seed.model, seed.prompt) == (H1, "script", "copy"):
            if seed.arm == "graded":
                seed = Seed(H1, "script", "copy", "graded", (120.0, 121.0, 119.0))
            elif seed.arm == "gated":
                seed = Seed(H1, "script", "copy", "gated", seed.rates, (5, ord("Q")))
        elif (seed.target, seed.prompt, seed.arm) == (H2, "copy", "graded"):
            seed = Seed(H2, "script", "copy", "graded", seed.rates)
        out.append(seed)
    return out


def mixed_seeds() -> list[Seed]:
    """h1 script copy plain / graded again, but with another prompt text under that name."""
    text = "a different prompt text"
    return [
        Seed(H1, "script", "copy", "plain", tuple(PLAIN_RATES), prompt_text=text),
        Seed(H1, "script", "copy", "graded", (120.0, 121.0, 119.0), prompt_text=text),
    ]


def repeats_matrix(store, matrix_id: str, changed: dict[tuple[str, str, int], list[int]],
                   arms=("plain", "graded", "gated", "hf-lookup")) -> str:
    """A done greedy matrix (`tests.store.factory`: 3 repeats of `edit_fn` and `story` on one
    target, every reply [5, 6, 7] `efg`, plain 10 tok/s, graded 20, gated 15, hf-lookup 12),
    with the replies of (prompt, arm, repeat) in `changed` replaced (tokens, and a text of
    their characters)."""
    rates = {"plain": 10.0, "graded": 20.0, "gated": 15.0, "hf-lookup": 12.0}
    runs = grid(arms=arms, repeats=3, prompts=("edit_fn", "story"), prefix=matrix_id)
    store.create_matrix(matrix_id, {"name": matrix_id}, runs, matrix_id=matrix_id)
    for run in runs:
        tokens = changed.get((run.prompt_name, run.arm, run.repeat), [5, 6, 7])
        store.record_result(result(run, rates[run.arm] + run.repeat / 10).model_copy(
            update={"token_ids": tokens, "output_text": "".join(chr(96 + t) for t in tokens)}))
    store.finish_matrix(matrix_id, "done")
    return matrix_id
