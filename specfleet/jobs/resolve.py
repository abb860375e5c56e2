"""What `matrix validate` checks in the file beyond one mistake: each type problem of the
file (pydantic reports them all), not only the first, one line each.

Where the models are (fetched, within their context) is asked of the hosts that would run
them, or of this machine without a fleet: `cluster/modelcheck.py`.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from specfleet.configs import matrix_path
from specfleet.errors import UserError
from specfleet.jobs.spec import MatrixSpec
from specfleet.jobs.spec_files import load_matrix_spec
from specfleet.jobs.userinput import check_plain_data, problem_lines
from specfleet.userfiles import read_yaml


class Problems(UserError):
    """Several user mistakes, one line each (the CLI prints every line)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\nerror: ".join(lines))
        self.lines = lines


def check_matrix_file(file: str) -> MatrixSpec:
    """Load `file`; raise `Problems` listing every mistake in it."""
    try:
        return load_matrix_spec(file)
    except UserError as first:
        raise Problems(_type_problems(file) or [str(first)]) from None


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


def describe(spec: MatrixSpec, file: str | Path, models: str) -> str:
    """The one-line summary `matrix validate` prints for a good file; `models` says where
    its models were resolved."""
    return (f"{file}: ok: {len(spec.models)} models x {len(spec.prompts)} prompts x "
            f"{len(spec.arms)} arms x {spec.repeats} repeats = {spec.runs_per_target()} "
            f"runs per target ({spec.targets.describe()}); {models}")
