"""Expand a spec into the ordered list of runs the scheduler executes.

Ordering guarantee (what `plan_runs` returns, and the order runs must execute in on a
target): targets sorted by label; within a target, models in spec order, then prompts in
spec order, then repeats 0..n-1; within one (target, model, prompt, repeat) every arm runs
back to back, in rotated spec order: repeat r starts at arm `r mod len(arms)`. With arms
[plain, graded, gated] that is plain graded gated / graded gated plain / gated plain graded,
so slow drift of the machine (heat, neighbours) hits every arm at every position alike.
A peer arm (`engine/peers.py`) is planned on its own engine's targets only and rotates with
the arms that run there; `peer_skips` says where it was left out.

Run keys are deterministic: a hash of (matrix id, host, engine, device, model, prompt, arm,
repeat), so planning the same matrix twice yields the same keys (idempotent store writes,
`resume` re-queues exactly what is missing).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path

from specfleet.configs import prompts_dir
from specfleet.engine.config import LookupOptions
from specfleet.engine.kinds import MODEL_ENGINES, Engine
from specfleet.engine.peers import peer_kind
from specfleet.errors import UserError
from specfleet.jobs.run import RunSpec, Target
from specfleet.jobs.spec import ArmSpec, GenerateJobSpec, MatrixSpec, PromptEntry
from specfleet.jobs.spec_checks import find_prompt_file
from specfleet.jobs.spec_files import read_prompt_text

RUN_KEY_HEX = 32  # 128 bits: collisions are out of reach for any fleet's history


def run_key(*parts: object) -> str:
    """A stable key for a run: the first 128 bits of SHA-256 over the parts as JSON.

    Args:
        *parts: strings and integers identifying the run, in a fixed order.

    Returns:
        32 lowercase hex digits; the same parts always give the same key.
    """
    blob = json.dumps([str(p) if not isinstance(p, int) else p for p in parts])
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:RUN_KEY_HEX]


def rotated(items: list, start: int) -> list:
    """`items` rotated to begin at index `start mod len(items)`."""
    if not items:
        return []
    k = start % len(items)
    return items[k:] + items[:k]


def select_targets(
    spec: MatrixSpec, targets: list[Target], host_kinds: Mapping[str, str] | None = None
) -> list[Target]:
    """The targets the spec's selector keeps, de-duplicated and sorted by label.

    Args:
        spec: the matrix.
        targets: every target of the fleet.
        host_kinds: host name -> kind label (`mac-mlx`, `gb10-cuda`, `linux-cpu`, ...);
            hosts missing here never match a `kinds` selector.

    Returns:
        The selected targets.

    Raises:
        UserError: none is selected.
    """
    kinds = host_kinds or {}
    chosen = {t.label: t for t in targets if spec.targets.matches(t, kinds.get(t.host))}
    if not chosen:
        known = ", ".join(sorted(t.label for t in targets)) or "none"
        raise UserError(f"{spec.label}: targets: no target matches "
                        f"({spec.targets.describe()}); the fleet has: {known}")
    return [chosen[label] for label in sorted(chosen)]


def prompt_texts(spec: MatrixSpec, prompt_dir: str | Path | None = None) -> dict[str, str]:
    """Every prompt's text by name: inline text, or the file read from the prompt directory.

    Args:
        spec: the matrix.
        prompt_dir: overrides `spec.prompt_dir` (set by `load_matrix_spec`).

    Returns:
        name -> text (without the file's final newline).
    """
    directory = Path(prompt_dir or spec.prompt_dir or prompts_dir())
    texts: dict[str, str] = {}
    for prompt in spec.prompts:
        texts[prompt.name] = prompt.text if prompt.text is not None else _read(directory, prompt)
    return texts


def _read(directory: Path, prompt: PromptEntry) -> str:
    path = find_prompt_file(directory, prompt.name)
    if path is None:
        raise UserError(f"prompts: no prompt file '{prompt.name}.txt' in {directory}")
    return read_prompt_text(path)


def plan_runs(
    spec: MatrixSpec,
    targets: list[Target],
    matrix_id: str,
    prompt_dir: str | Path | None = None,
    host_kinds: Mapping[str, str] | None = None,
) -> list[RunSpec]:
    """Expand a matrix into runs, in execution order (see the module docstring).

    Args:
        spec: the matrix (from `load_matrix_spec`).
        targets: the fleet's targets; the spec's selector (and each prompt's) filters them.
        matrix_id: the id the store gives this matrix; part of every run key.
        prompt_dir: where named prompts are read; default `spec.prompt_dir`.
        host_kinds: host name -> kind, for `targets.kinds` selectors.

    Returns:
        One `RunSpec` per (target, model, prompt, repeat, arm).
    """
    texts = prompt_texts(spec, prompt_dir)
    kinds = host_kinds or {}
    runs: list[RunSpec] = []
    chosen = select_targets(spec, targets, kinds)
    peer_skips(spec, chosen)  # a peer arm that fits none of them is a mistake
    for target in chosen:
        for model in spec.models:
            for prompt in spec.prompts:
                if prompt.targets and not prompt.targets.matches(target, kinds.get(target.host)):
                    continue
                text = texts[prompt.name] + spec.prompt_suffix.get(model, "")
                runs += _cell_runs(spec, target, model, prompt, text, matrix_id)
    return runs


def fits(arm: str, target: Target) -> bool:
    """Whether an arm runs on a target: ours everywhere, a peer on its own engines only."""
    return arm_runs_on(arm, target.engine)


def arm_runs_on(arm: str, engine: str) -> bool:
    """Whether an arm runs on targets of `engine`: ours on every one, a peer on its own."""
    kind = peer_kind(arm)
    return kind is None or engine in kind.engines


def runs_by_engine(spec: MatrixSpec, no_source: Collection[tuple[str, str]] = ()
                   ) -> dict[Engine, int]:
    """The runs `plan_runs` gives a target of each engine the matrix may run on: a prompt's
    own engines and a peer arm's leave some out on the others, and so does a model whose
    alias names no source for an engine (`no_source`, as `drop_sourceless` leaves them out).

    Returns:
        engine -> runs per target of that engine; a prompt's own hosts, kinds or devices
        leave some targets fewer still (`by_target_within_engine`).
    """
    def per_target(engine: Engine) -> int:
        models = [m for m in spec.models if (m, engine) not in no_source]
        prompts = [p for p in spec.prompts
                   if not (p.targets and p.targets.engines) or engine in p.targets.engines]
        arms = [arm for arm in spec.arms if arm_runs_on(arm.arm, engine)]
        return len(models) * len(prompts) * len(arms) * spec.repeats

    # Toy targets exist only where a matrix asks for them.
    return {engine: per_target(engine) for engine in spec.targets.engines or MODEL_ENGINES}


def by_target_within_engine(spec: MatrixSpec) -> bool:
    """Whether targets of one engine may get different runs: some prompt has its own hosts,
    kinds or devices."""
    return any(prompt.targets and (prompt.targets.hosts or prompt.targets.kinds
                                   or prompt.targets.devices) for prompt in spec.prompts)


def peer_skips(spec: MatrixSpec, targets: list[Target]) -> list[str]:
    """Why each peer arm is left out of some selected targets, one line each.

    Raises:
        UserError: a peer arm fits none of the targets (nothing of it would run).
    """
    lines = []
    for i, arm in enumerate(spec.arms):
        kind = peer_kind(arm.arm)
        if kind is None:
            continue
        left = [t.label for t in targets if not fits(arm.arm, t)]
        if len(left) == len(targets):
            raise UserError(f"{spec.label}: arms[{i}]: {arm.arm} runs on "
                            f"{kind.runs_on} targets only, and none is selected ({', '.join(left)})")
        if left:
            lines.append(f"arm {arm.arm} runs on {kind.runs_on} targets only: skipped on "
                         f"{', '.join(left)}")
    return lines


def drop_sourceless(runs: list[RunSpec], no_source: list[tuple[str, str]], label: str
                    ) -> tuple[list[RunSpec], list[str]]:
    """Leave out the runs of (model, engine) cells whose alias names no source for that
    engine (an MLX-only quantisation in a matrix open to every engine): they could only fail.

    Returns:
        The runs kept, and one line per model and engine saying where it was skipped.

    Raises:
        UserError: nothing is left to run.
    """
    lines = []
    for model, engine in no_source:
        left = sorted({r.target.label for r in runs if (r.model, r.target.engine) == (model, engine)})
        if left:
            lines.append(f"model {model} has no {engine} source: skipped on {', '.join(left)}")
    kept = [r for r in runs if (r.model, r.target.engine) not in set(no_source)]
    if runs and not kept:
        raise UserError(f"{label}: no target of this fleet runs any of its models; expected a "
                        "model with a source for one of the fleet's engines")
    return kept, lines


def _cell_runs(spec: MatrixSpec, target: Target, model: str, prompt: PromptEntry, text: str,
               matrix_id: str) -> list[RunSpec]:
    max_tokens = spec.max_tokens_for(prompt, target.engine)
    arms = [arm for arm in spec.arms if fits(arm.arm, target)]
    runs = []
    for repeat in range(spec.repeats):
        for arm in rotated(arms, repeat):
            key = run_key(matrix_id, target.host, target.engine, target.device, model,
                          prompt.name, arm.arm, repeat)
            runs.append(RunSpec(
                run_key=key, matrix_id=matrix_id, target=target, model=model,
                prompt_name=prompt.name, prompt_text=text, chat=spec.chat, arm=arm.arm,
                lookup=_lookup(arm), repeat=repeat, max_tokens=max_tokens,
                temperature=spec.temperature, seed=spec.seed, loop_guard=spec.loop_guard,
            ))
    return runs


def _lookup(arm: ArmSpec) -> LookupOptions:
    return arm.lookup_options() if arm.arm != "plain" else LookupOptions()


def plan_generate_runs(job: GenerateJobSpec, target: Target, job_id: str) -> list[RunSpec]:
    """One run per prompt of a generation batch, in file order, on one target.

    Args:
        job: the batch (from `load_generate_job`).
        target: the target `job.target` resolved to (see `batch.select_target`).
        job_id: the id the store gives the batch; part of every run key.

    Returns:
        The runs; `arm` is the job's policy and `repeat` is 0.
    """
    lookup = replace(job.lookup, adaptive=job.policy != "fixed")
    return [
        RunSpec(
            run_key=run_key(job_id, target.host, target.engine, target.device, job.model,
                            prompt.name, job.policy, 0),
            matrix_id=job_id, target=target, model=job.model, prompt_name=prompt.name or "",
            prompt_text=prompt.prompt, chat=job.chat, arm=job.policy, lookup=lookup, repeat=0,
            max_tokens=prompt.max_tokens or job.max_tokens, temperature=job.temperature,
            seed=job.seed, loop_guard=job.loop_guard,
        )
        for prompt in job.prompts
    ]
