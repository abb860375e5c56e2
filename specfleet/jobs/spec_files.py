"""Reading a matrix file into a checked `MatrixSpec` (or `ParitySpec`), and prompt files.

Every mistake is a line `file: field.path: what is expected`; `check_matrix_file` finds every
independent one (`matrix validate` prints each), `load_matrix_spec` says them in one line
(`userinput.one_line_of`), as every other command that reads a matrix does. Prompt names
refer to `<name>.txt` (or `.md`) in the prompt directory: `prompt_dir` in the file (relative
to the file), else `../prompts` next to the file's folder when there is one, else the
packaged prompts. A bare matrix name (`demo`) is the packaged `specfleet/configs/matrices/`
file of that name.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specfleet.configs import is_bare_name, matrices_dir, matrix_path, packaged_names, prompts_dir
from specfleet.errors import UserError, describe_value
from specfleet.jobs.spec import MatrixSpec, ParitySpec
from specfleet.jobs.spec_checks import LeftOut, Loc, matrix_problems
from specfleet.jobs.userinput import Problems, check_plain_data, one_line_of, problem_lines
from specfleet.userfiles import given_path, read_text
from specfleet.yamlfiles import read_yaml


def read_prompt_text(path: Path, label: str | None = None) -> str:
    """A prompt file's text without its final newline (`without_final_newline`); a refusal
    names it as `label` (default: its path)."""
    return without_final_newline(read_text(path, label or str(path),
                                           expected="a prompt text file"))


def without_final_newline(text: str) -> str:
    """A prompt read from a file or a pipe, without the line breaks that end it: editors and
    `echo` add one, and it is no content (`generate --prompt-file story` and a matrix's
    `story` tokenize alike)."""
    return text.rstrip("\r\n")


def load_matrix_spec(path: str | Path, prompt_dir: str | Path | None = None) -> MatrixSpec:
    """Load and check a matrix YAML file.

    Args:
        path: the YAML file, or a packaged matrix's bare name (`demo`).
        prompt_dir: where named prompts live; default: `prompt_dir` in the file (relative to
            it), else `<file's folder>/../prompts` if it exists, else the packaged prompts.

    Returns:
        The spec, with `prompt_dir` set to the absolute directory prompts were checked in.

    Raises:
        UserError: one line naming the file, the field path and what is expected; with
            several mistakes, the first few in full and how many more (`matrix validate`
            lists every one).
    """
    try:
        return check_matrix_file(path, prompt_dir)
    except Problems as err:
        every = f"`specfleet matrix validate {shlex.quote(str(path))}` lists every one"
        raise UserError(one_line_of(err.label, err.lines, every)) from None


def check_matrix_file(path: str | Path, prompt_dir: str | Path | None = None) -> MatrixSpec:
    """Load and check a matrix YAML file, finding every independent mistake in it.

    Args:
        path, prompt_dir: as in `load_matrix_spec`.

    Returns:
        The spec, as `load_matrix_spec` returns it.

    Raises:
        Problems: the file's mistakes, one line each (`file: field.path: expectation`).
        UserError: a file that cannot be read as a mapping of fields: its one line.
    """
    label = str(path)
    names = ", ".join(packaged_names(matrices_dir()))
    given_path(label, "matrix file", f"a YAML file or a packaged matrix ({names})")
    resolved = matrix_path(path)
    if not os.path.lexists(resolved) and is_bare_name(label):
        raise UserError(f"{label}: no such file, nor a packaged matrix (packaged: {names})")
    data = read_yaml(resolved, label)
    return parse_matrix_spec(data, label, resolved.resolve().parent, prompt_dir)


def parse_matrix_spec(
    data: Any, label: str, base_dir: Path, prompt_dir: str | Path | None = None
) -> MatrixSpec:
    """Check already-parsed YAML data as a matrix (see `check_matrix_file`).

    Raises:
        Problems: every independent mistake (its `str()` says them in one line).
        UserError: data that is not a mapping of plain fields: its one line.
    """
    if data is None:
        raise UserError(f"{label}: the file is empty; expected a matrix (name, models, prompts, arms)")
    if not isinstance(data, dict):
        raise UserError(f"{label}: expected a mapping of fields at the top level, got "
                        f"{describe_value(data)}")
    check_plain_data(data, label)
    spec, problems, left_out = _typed(data, label)
    if spec is None:
        raise Problems(label, problems)
    spec = _anchor_model_folders(spec, base_dir)
    directory, fallback = _prompt_dir(spec, base_dir, prompt_dir)
    problems += matrix_problems(spec, label, directory, beside=base_dir if fallback else None,
                                left_out=left_out)
    if problems:
        kept = _models_to_resolve(spec, label, problems, left_out)
        readable = _models_alone(spec, [model for _, model in kept]) if kept else None
        raise MatrixProblems(label, _in_file_order(problems, label, data), data, readable,
                             tuple(place for place, _ in kept))
    return spec.model_copy(update={"prompt_dir": str(directory)}).from_source(label)


def _models_to_resolve(spec: MatrixSpec, label: str, problems: list[str],
                       left_out: LeftOut) -> list[tuple[int, str]]:
    """The models of a file with mistakes that can still be resolved, each with its place in
    the file: not one already found wrong (blank, a duplicate), and none when the engines to
    resolve them for are unknown (targets mistyped: the checks that read it are left out)."""
    if "models" in left_out.fields or left_out.touches(("targets",)):
        return []
    at = re.compile(rf"{re.escape(label)}: models\[(\d+)\]")
    said = {int(found[1]) for line in problems if (found := at.match(line))}
    return [(place, model) for place, model in left_out.numbered(("models",), spec.models)
            if place not in said]


class MatrixProblems(Problems):
    """A matrix file's mistakes, and what of it could still be read: `readable` (None: its
    models could not be read) is a matrix of the models that parsed, on the file's targets,
    with one inline prompt of a one-token reply and the plain arm, for `matrix validate` to
    check them in the same run (aliases and folders; not their context, which reads the
    prompts and token limits of a file still to be fixed)."""

    def __init__(self, label: str, lines: list[str], data: dict[str, Any],
                 readable: MatrixSpec | None, places: tuple[int, ...]) -> None:
        super().__init__(label, lines)
        self.data = data
        self.readable = readable
        self.places = places  # the file's index of each of `readable.models`

    def with_model_lines(self, model_lines: list[str]) -> list[str]:
        """The file's mistakes and the model checks' lines of `readable` (`models[i]` as
        the file numbers them), in file order."""
        at = re.compile(rf"^({re.escape(self.label)}: models\[)(\d+)\]")
        placed = [at.sub(lambda m: f"{m[1]}{self.places[int(m[2])]}]", line)
                  for line in model_lines]
        return _in_file_order([*self.lines, *placed], self.label, self.data)


def _models_alone(spec: MatrixSpec, models: list[str]) -> MatrixSpec | None:
    try:
        return MatrixSpec.model_validate({
            "name": spec.name, "models": models, "targets": spec.targets,
            "prompts": [{"name": "p", "text": "p"}], "arms": ["plain"], "max_tokens": 1})
    except ValidationError:  # a check of the models' own (duplicates): said already
        return None


# What a required field that failed its type stands in for, so the checks of the other
# fields still run (the checks that read it are left out).
_STAND_INS: dict[str, Any] = {"name": "x", "models": ["x"], "prompts": ["x"], "arms": ["plain"]}


def _typed(data: dict[str, Any], label: str) -> tuple[MatrixSpec | None, list[str], LeftOut]:
    """The spec, each type problem (one line each) and what they left out: when some are
    wrong, the spec of the well-typed fields and list items alone, None if even that fails."""
    try:
        return MatrixSpec.model_validate(data), [], LeftOut()
    except ValidationError as err:
        problems = problem_lines(label, MatrixSpec, err)
        left_out = _left_out(err)
    for _ in range(2):
        try:
            return MatrixSpec.model_validate(_kept(data, left_out)), problems, left_out
        except ValidationError as err:
            # Leaving items out emptied a list that must have some: stand in for the list.
            emptied = {str(error["loc"][0]) for error in err.errors() if error["loc"]}
            left_out = replace(left_out, fields=left_out.fields | emptied)
    return None, problems, left_out


def _left_out(err: ValidationError) -> LeftOut:
    """The list item each problem is in (the innermost: `prompts[0].targets.hosts[2]`), else
    its top-level field."""
    fields: set[str] = set()
    items: set[Loc] = set()
    for error in err.errors():
        loc: Loc = tuple(error["loc"])
        last_index = max((i for i, part in enumerate(loc) if isinstance(part, int)), default=None)
        if last_index is not None:
            items.add(loc[:last_index + 1])
        elif loc:
            fields.add(str(loc[0]))
    return LeftOut(frozenset(fields), frozenset(items))


def _kept(data: dict[str, Any], left_out: LeftOut) -> dict[str, Any]:
    """`data` without what was left out, required fields stood in for."""
    def without(value: Any, loc: Loc) -> Any:
        if isinstance(value, list):
            return [without(item, (*loc, i)) for i, item in enumerate(value)
                    if (*loc, i) not in left_out.items]
        if isinstance(value, dict):
            return {key: without(item, (*loc, key)) for key, item in value.items()}
        return value

    typed = {key: without(value, (key,)) for key, value in data.items()
             if key not in left_out.fields}
    return {**_STAND_INS, **typed}


def _in_file_order(problems: list[str], label: str, data: dict[str, Any]) -> list[str]:
    """The problems in the order of the fields and list items they name as the file has them
    (a field it left out after them): type problems and cross-field ones read top to bottom
    alike, `arms[1]` before `arms[3]` whichever check found them."""
    order = [*data, *(name for name in MatrixSpec.model_fields if name not in data)]

    def place(line: str) -> tuple[int, ...]:
        path = line.removeprefix(f"{label}: ")
        field = re.split(r"[\[.:]", path, maxsplit=1)[0]
        if field not in order:
            return (len(order),)
        return (order.index(field), *_place_in(data.get(field), path[len(field):]))

    return sorted(problems, key=place)


def _place_in(value: Any, path: str) -> tuple[int, ...]:
    """Where the rest of a path (`[2].targets.hosts[1]: ...`) is inside `value`: the position
    of each item and key along it, as far as the file has them."""
    if isinstance(value, list) and (index := re.match(r"\[(\d+)\]", path)):
        i = int(index[1])
        inner = value[i] if i < len(value) else None
        return (i, *_place_in(inner, path[index.end():]))
    if isinstance(value, dict) and path.startswith("."):
        rest = path[1:]
        # The longest key the path goes on with (a key may hold '.' or ':', as a model may).
        keys = [key for key in value if rest.startswith(key)
                and rest[len(key):len(key) + 1] in ("", ".", "[", ":")]
        if keys:
            key = max(keys, key=len)
            return (list(value).index(key), *_place_in(value[key], rest[len(key):]))
    return ()


def anchored_model(model: str, base_dir: Path) -> str:
    """`model` as a worker standing in another folder must find it: a relative folder
    (`.`, `./smol`, `models/x`, `../models/x`, `~/m`) made absolute from `base_dir`.

    Returns:
        The absolute folder; an alias, `hf:ORG/NAME`, a toy model or an absolute folder as
        given.
    """
    # An alias holds no '/' (models.yaml refuses one), `hf:ORG/NAME` a ':' before it.
    head, slash, _ = model.partition("/")
    if not (model in (".", "..") or model.startswith("~") or (slash and head and ":" not in head)):
        return model
    try:
        return str((base_dir / Path(model).expanduser()).resolve())
    except RuntimeError:  # `~USER` of no user: resolving the model names the field
        return model


def _anchor_model_folders(spec: MatrixSpec, base_dir: Path) -> MatrixSpec:
    """A model given as a relative folder names it from the matrix file's folder (`bench`:
    the current one): the same absolute path in `models` and `prompt_suffix`."""
    if not any(anchored_model(m, base_dir) != m for m in spec.models):
        return spec
    return spec.model_copy(update={
        "models": [anchored_model(m, base_dir) for m in spec.models],
        "prompt_suffix": {anchored_model(k, base_dir): v
                          for k, v in spec.prompt_suffix.items()}})


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
    if spec.arm_names() == ["plain"]:  # else it ran, then failed: "no pair to compare"
        raise UserError(f"{path}: arms: plain alone: parity compares every other arm with plain; "
                        "expected an arm besides plain (graded, calibrated, ...)")
    forced = []
    if spec.repeats != 1:
        forced.append(f"repeats {spec.repeats} -> 1")
    if spec.temperature != 0.0:
        forced.append(f"temperature {spec.temperature} -> 0")
    if spec.seed is not None:  # greedy draws nothing: a seed there is refused in a file
        forced.append(f"seed {spec.seed} -> none")
    fields = spec.model_dump(exclude={"repeats", "temperature", "seed"})
    return ParitySpec.model_validate({**fields, "overridden": forced}).from_source(str(path))
