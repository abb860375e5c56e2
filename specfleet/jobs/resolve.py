"""What `matrix validate` checks beyond one mistake: every problem of a file at once, and
everything a run will need resolved before any run starts.

- each type problem of the file (pydantic reports them all), not only the first;
- each model on each engine it may run on: a known alias or folder, fetched (else the
  command that fetches it), a toy model name for the toy engine;
- each prompt's token limit below the model's context length (from its `config.json`).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from specfleet.configs import matrix_path
from specfleet.engine.kinds import Engine
from specfleet.errors import UserError
from specfleet.jobs.spec import MatrixSpec, load_matrix_spec
from specfleet.jobs.userinput import check_plain_data, problem_lines, read_yaml

REAL_ENGINES: tuple[Engine, ...] = ("mlx", "torch")


class Problems(UserError):
    """Several user mistakes, one line each (the CLI prints every line)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\nerror: ".join(lines))
        self.lines = lines


def check_matrix_file(file: str) -> MatrixSpec:
    """Load `file` and resolve what its runs need; raise `Problems` listing every mistake."""
    try:
        spec = load_matrix_spec(file)
    except UserError as first:
        raise Problems(_type_problems(file) or [str(first)]) from None
    problems = model_problems(spec, file)
    if problems:
        raise Problems(problems)
    return spec


def _type_problems(file: str) -> list[str]:
    try:
        data = read_yaml(matrix_path(file), file)
        check_plain_data(data, file)
    except UserError:
        return []  # a file-level fault is the only thing worth saying
    if not isinstance(data, dict):
        return []
    try:
        MatrixSpec.model_validate(data)
    except ValidationError as err:
        return problem_lines(file, MatrixSpec, err)
    return []


def model_problems(spec: MatrixSpec, label: str) -> list[str]:
    """Every model that cannot run where the matrix may send it, one line each."""
    problems: list[str] = []
    for i, model in enumerate(spec.models):
        engines = list(spec.targets.engines) or list(REAL_ENGINES)
        found = [_model_problem(spec, model, engine) for engine in engines]
        failing = [p for p in found if p is not None]
        if spec.targets.engines or len(failing) == len(found):
            bare = {p.split(": ", 1)[-1] for p in failing}
            lines = bare if len(bare) == 1 and len(failing) > 1 else dict.fromkeys(failing)
            problems.extend(f"{label}: models[{i}]: {p}" for p in lines)
    return problems


def _model_problem(spec: MatrixSpec, model: str, engine: str) -> str | None:
    if engine == "toy":
        from specfleet.workers.toy import parse_toy_model

        try:
            parse_toy_model(model)
        except UserError as err:
            return str(err)
        return None
    from specfleet.engine.models import context_tokens, resolve_model

    try:
        resolved = resolve_model(model, engine)
    except UserError as err:
        return f"{engine}: {err}"
    context = context_tokens(resolved.path)
    longest = max(spec.max_tokens_for(p, engine) for p in spec.prompts)
    if context is not None and longest >= context:
        return (f"{engine}: max_tokens {longest} leaves no room for the prompt in the model's "
                f"context of {context} tokens")
    return None


def describe(spec: MatrixSpec, file: str | Path) -> str:
    """The one-line summary `matrix validate` prints for a good file."""
    return (f"{file}: ok: {len(spec.models)} models x {len(spec.prompts)} prompts x "
            f"{len(spec.arms)} arms x {spec.repeats} repeats = {spec.runs_per_target()} "
            f"runs per target ({spec.targets.describe()}); every model resolved")
