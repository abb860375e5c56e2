"""Reading a matrix file into a checked `MatrixSpec` (or `ParitySpec`), and prompt files.

Every mistake is ONE `UserError` line: `file: field.path: what is expected`. Prompt names
refer to `<name>.txt` (or `.md`) in the prompt directory: `prompt_dir` in the file (relative
to the file), else `../prompts` next to the file's folder when there is one, else the
packaged prompts. A bare matrix name (`demo`) is the packaged `specfleet/configs/matrices/`
file of that name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specfleet.configs import is_bare_name, matrices_dir, matrix_path, packaged_names, prompts_dir
from specfleet.errors import UserError, describe_value
from specfleet.jobs.spec import MatrixSpec, ParitySpec
from specfleet.jobs.spec_checks import check_matrix
from specfleet.jobs.userinput import check_plain_data, validation_message
from specfleet.userfiles import given_path, read_text, read_yaml


def read_prompt_text(path: Path) -> str:
    """A prompt file's text without its final newline (editors add one; it is no content)."""
    return read_text(path, str(path), expected="a prompt text file").rstrip("\r\n")


def load_matrix_spec(path: str | Path, prompt_dir: str | Path | None = None) -> MatrixSpec:
    """Load and check a matrix YAML file.

    Args:
        path: the YAML file, or a packaged matrix's bare name (`demo`).
        prompt_dir: where named prompts live; default: `prompt_dir` in the file (relative to
            it), else `<file's folder>/../prompts` if it exists, else the packaged prompts.

    Returns:
        The spec, with `prompt_dir` set to the absolute directory prompts were checked in.

    Raises:
        UserError: one line naming the file, the field path and what is expected.
    """
    label = str(path)
    names = ", ".join(packaged_names(matrices_dir()))
    given_path(label, "matrix file", f"a YAML file or a packaged matrix ({names})")
    resolved = matrix_path(path)
    if not resolved.exists() and is_bare_name(label):
        raise UserError(f"{label}: no such file, nor a packaged matrix (packaged: {names})")
    data = read_yaml(resolved, label)
    return parse_matrix_spec(data, label, resolved.resolve().parent, prompt_dir)


def parse_matrix_spec(
    data: Any, label: str, base_dir: Path, prompt_dir: str | Path | None = None
) -> MatrixSpec:
    """Check already-parsed YAML data as a matrix (see `load_matrix_spec`)."""
    if data is None:
        raise UserError(f"{label}: the file is empty; expected a matrix (name, models, prompts, arms)")
    if not isinstance(data, dict):
        raise UserError(f"{label}: expected a mapping of fields at the top level, got "
                        f"{describe_value(data)}")
    check_plain_data(data, label)
    try:
        spec = MatrixSpec.model_validate(data)
    except ValidationError as err:
        raise UserError(validation_message(label, MatrixSpec, err)) from None
    spec = _anchor_model_folders(spec, base_dir)
    directory, fallback = _prompt_dir(spec, base_dir, prompt_dir)
    check_matrix(spec, label, directory, beside=base_dir if fallback else None)
    return spec.model_copy(update={"prompt_dir": str(directory)})


def _anchor_model_folders(spec: MatrixSpec, base_dir: Path) -> MatrixSpec:
    """A model given as a relative folder (`./smol`, `../models/x`, `~/m`) names it from the
    matrix file's folder (`bench`: the current one), as a worker with another working folder
    must find it: the same absolute path in `models` and `prompt_suffix`."""
    def anchored(model: str) -> str:
        if not model.startswith(("./", "../", "~")):
            return model  # an alias, `hf:ORG/NAME`, an absolute folder
        return str((base_dir / Path(model).expanduser()).resolve())

    if not any(anchored(m) != m for m in spec.models):
        return spec
    return spec.model_copy(update={
        "models": [anchored(m) for m in spec.models],
        "prompt_suffix": {anchored(k): v for k, v in spec.prompt_suffix.items()}})


def _prompt_dir(spec: MatrixSpec, base_dir: Path,
                override: str | Path | None) -> tuple[Path, bool]:
    """Where named prompts are read, and whether that is the packaged folder by default."""
    if override is not None:
        return Path(override).resolve(), False
    if spec.prompt_dir is not None:
        return (base_dir / spec.prompt_dir).resolve(), False
    beside = base_dir.parent / "prompts"
    return (beside.resolve(), False) if beside.is_dir() else (prompts_dir(), True)


def load_parity_spec(path: str | Path, prompt_dir: str | Path | None = None) -> ParitySpec:
    """Load a matrix file as a parity check: greedy (temperature 0), one repeat, plain needed.

    Args:
        path: the YAML file (any matrix file; repeats and temperature are forced).
        prompt_dir: as in `load_matrix_spec`.

    Returns:
        The parity spec; `overridden` lists forced changes, e.g. `repeats 3 -> 1`.
    """
    spec = load_matrix_spec(path, prompt_dir)
    if "plain" not in spec.arm_names():
        raise UserError(f"{path}: arms: add the plain arm: parity compares every arm with plain")
    forced = []
    if spec.repeats != 1:
        forced.append(f"repeats {spec.repeats} -> 1")
    if spec.temperature != 0.0:
        forced.append(f"temperature {spec.temperature} -> 0")
    fields = spec.model_dump(exclude={"repeats", "temperature"})
    return ParitySpec.model_validate({**fields, "overridden": forced})


def validate_file(path: str | Path, prompt_dir: str | Path | None = None) -> str:
    """Check a matrix file and describe it in one line (for `specfleet matrix validate`).

    Args:
        path: the YAML file.
        prompt_dir: as in `load_matrix_spec`.

    Returns:
        e.g. `demo.yaml: matrix 'demo' is valid: 1 model x 5 prompts x 3 arms x 3 repeats =
        45 runs per target (engines in [torch, mlx])`.

    Raises:
        UserError: the first mistake, one line.
    """
    spec = load_matrix_spec(path, prompt_dir)
    counts = (f"{_count(len(spec.models), 'model')} x {_count(len(spec.prompts), 'prompt')} x "
              f"{_count(len(spec.arms), 'arm')} x {_count(spec.repeats, 'repeat')}")
    upto = "up to " if any(p.targets for p in spec.prompts) else ""
    return (f"{path}: matrix '{spec.name}' is valid: {counts} = {upto}{spec.runs_per_target()} "
            f"runs per target ({spec.targets.describe()})")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
