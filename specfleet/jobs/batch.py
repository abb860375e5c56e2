"""Generation batches: a JSONL file of prompts run on one target (`specfleet job generate`).

Each line of the file is a JSON object `{"name"?: str, "prompt": str, "max_tokens"?: int}`;
blank lines are skipped. Unnamed prompts are called `line-<n>` after their line number.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from specfleet.engine.config import ConfigError, LookupOptions, PromptLookupConfig
from specfleet.errors import UserError
from specfleet.jobs.run import Target
from specfleet.jobs.spec import GenerateJobSpec, GeneratePrompt, TargetRef
from specfleet.jobs.spec_files import anchored_model
from specfleet.jobs.userinput import check_plain_data, first_problem, validation_message
from specfleet.userfiles import (
    STDIN,
    given_path,
    read_stream,
    read_text,
    standard_input,
    too_long_integer,
)


def parse_target_ref(text: str, flag: str = "--target") -> TargetRef:
    """Parse `HOST/ENGINE` or `HOST/ENGINE/DEVICE`.

    Args:
        text: what the user typed.
        flag: the flag named in error messages.

    Returns:
        The reference; match it against the fleet's targets with `select_target`.
    """
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise UserError(f"{flag}: expected HOST/ENGINE or HOST/ENGINE/DEVICE, got {text!r}")
    fields = dict(zip(("host", "engine", "device"), parts, strict=False))
    try:
        return TargetRef.model_validate(fields)
    except ValidationError as err:
        raise UserError(validation_message(flag, TargetRef, err)) from None


def select_target(ref: TargetRef, targets: list[Target], flag: str = "--target",
                  fleet_hosts: list[str] | None = None) -> Target:
    """The one target of the fleet that `ref` names.

    Args:
        ref: the user's reference.
        targets: the targets of the hosts asked (`ref`'s host alone, or every host).
        flag: the flag named in error messages.
        fleet_hosts: every host of the fleet, when `targets` are only some hosts': a host
            not among them is said with the hosts there are.

    Returns:
        The matching target.

    Raises:
        UserError: no target or more than one matches.
    """
    found = [t for t in targets if ref.matches(t)]
    if len(found) == 1:
        return found[0]
    if found:
        raise UserError(f"{flag}: {_ref_label(ref)} names {len(found)} targets; add the device "
                        f"({', '.join(sorted(t.label for t in found))})")
    if fleet_hosts is not None and ref.host not in fleet_hosts:
        raise UserError(f"{flag}: no host {ref.host} in the fleet (hosts: "
                        f"{', '.join(sorted(fleet_hosts)) or 'none'}); `specfleet fleet status` "
                        "lists their targets")
    known = ", ".join(sorted(t.label for t in targets)) or "none"
    raise UserError(f"{flag}: no target {_ref_label(ref)} in the fleet (targets: {known})")


def _ref_label(ref: TargetRef) -> str:
    return "/".join(p for p in (ref.host, ref.engine, ref.device) if p)


def read_prompt_lines(path: str | Path) -> list[GeneratePrompt]:
    """Read a JSONL prompt file; a bad line is one `UserError` naming file and line."""
    label = str(path)
    expected = 'a JSONL file, one {"prompt": ...} a line'
    prompts: list[GeneratePrompt] = []
    numbers: list[int] = []  # each prompt's line
    if label == STDIN:
        label = f"--prompts {STDIN}"
        text = read_stream(standard_input(), label, expected)
    else:
        # A pipe (`<(jq ...)`) is refused as every file here is: say how to pipe one.
        in_file = f"{expected} (or - to read standard input)"
        text = read_text(given_path(label, "--prompts", in_file), label, expected=in_file)
    # A line ends at "\n" only: a JSON string may hold U+2028 or U+0085 raw (splitlines).
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            prompts.append(_prompt_line(line, f"{label}: line {number}", number))
            numbers.append(number)
    if not prompts:
        raise UserError(f'{label}: no prompts; expected one JSON object per line, e.g. '
                        '{"prompt": "..."}')
    _check_unique_names(prompts, numbers, label)
    return prompts


class _DuplicateKey(ValueError):
    """A JSON object giving a key twice (json.loads would let the last one win)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise _DuplicateKey(key)
        data[key] = value
    return data


def _prompt_line(line: str, where: str, number: int) -> GeneratePrompt:
    try:
        data: Any = json.loads(line, object_pairs_hook=_unique_keys)
    except _DuplicateKey as err:
        raise UserError(f"{where}: duplicate key {err.args[0]!r}; expected each field once") \
            from None
    except json.JSONDecodeError as err:
        msg = err.msg.removesuffix(" at")  # "Invalid control character at"
        # `{` alone on line 1: a pretty-printed object, which JSONL has on one line.
        raise UserError(f"{where}: not JSON ({msg} at column {err.colno}); expected one JSON "
                        'object a line, like {"prompt": "..."}') from None
    except RecursionError:
        raise UserError(f"{where}: nested too deeply; expected a flat JSON object like "
                        '{"prompt": "..."}') from None
    except ValueError:  # int() of more than 4300 digits
        raise UserError(f"{where}: {too_long_integer()}; expected a shorter number") from None
    if not isinstance(data, dict):
        raise UserError(f'{where}: expected a JSON object like {{"prompt": "..."}}')
    check_plain_data(data, where)  # "\u0000" is valid JSON, yet no engine or store takes it
    if data.get("name") is None:  # null is no name: unnamed, two lines shared one run key
        data["name"] = f"line-{number}"
    try:
        return GeneratePrompt.model_validate(data)
    except ValidationError as err:
        raise UserError(validation_message(where, GeneratePrompt, err)) from None


def _check_unique_names(prompts: list[GeneratePrompt], numbers: list[int], label: str) -> None:
    first: dict[str, int] = {}
    for prompt, number in zip(prompts, numbers, strict=True):
        name = prompt.name or ""
        if name in first:
            raise UserError(f"{label}: duplicate prompt name '{name}' on lines {first[name]} and "
                            f"{number}; expected each name once (an unnamed line is line-N)")
        first[name] = number


# A `GenerateJobSpec` field whose flag is not its name with dashes (`generate`'s `--temp`).
_FIELD_FLAGS = {"temperature": "--temp"}


def load_generate_job(prompts_path: str | Path, **options: Any) -> GenerateJobSpec:
    """Build a generation job from a JSONL prompt file and the command's flags.

    Args:
        prompts_path: the JSONL file.
        **options: `model` (a relative folder is read from the current one), `target` (a
            `TargetRef` or `HOST/ENGINE[/DEVICE]`), and any of
            `policy`, `lookup`, `max_tokens`, `temperature`, `seed`, `chat`, `loop_guard`
            (the `GenerateJobSpec` fields); a bad value names its flag (`--max-tokens`,
            `--temp`).

    Returns:
        The job.
    """
    prompts = read_prompt_lines(prompts_path)
    if isinstance(options.get("model"), str):  # `./smol`: a worker stands in another folder
        options["model"] = anchored_model(options["model"], Path.cwd())
    if isinstance(options.get("target"), str):
        options["target"] = parse_target_ref(options["target"])
    try:
        job = GenerateJobSpec.model_validate({**options, "prompts": prompts})
    except ValidationError as err:
        where, text = first_problem(GenerateJobSpec, err)
        field = where.split(".")[0].split("[")[0]
        flag = _FIELD_FLAGS.get(field, "--" + field.replace("_", "-"))
        raise UserError(f"{flag}: {text}") from None
    _check_lookup(job.lookup)
    return job


def _check_lookup(lookup: LookupOptions) -> None:
    config = PromptLookupConfig.of(lookup)
    try:
        config.validate()
    except ConfigError as err:
        flag = (err.field or "options").replace("_", "-")
        raise UserError(f"--prompt-lookup-{flag}: {err}") from None
