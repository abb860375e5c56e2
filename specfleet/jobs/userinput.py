"""Turning the mistakes in user YAML into one line each.

`check_plain_data` refuses what no type can (deep nesting, alias bombs, NUL characters);
`problem_lines` turns a pydantic `ValidationError` into `field.path[2].name: what is
expected, got what` lines, and `one_line_of` (`validation_message`) says several problems of
one file or flag in the one line every command but `matrix validate` prints.
`yamlfiles.read_yaml` parses the file.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from specfleet.errors import UserError, describe_value, is_utf8
from specfleet.yamlfiles import MAX_DEPTH, MAX_NODES


def check_plain_data(data: Any, label: str) -> None:
    """Refuse what types cannot: nesting deeper than `MAX_DEPTH`, more than `MAX_NODES`
    values (alias bombs), and text with a NUL character or a lone surrogate (no store or
    engine takes either).

    Raises:
        UserError: naming the field path.
    """
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    seen = 0
    while stack:
        value, loc = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            raise UserError(f"{label}: more than {MAX_NODES} values (YAML aliases expanding?)")
        if len(loc) > MAX_DEPTH:
            raise UserError(f"{label}: {format_loc(loc[:3])}...: nested too deeply "
                            f"(at most {MAX_DEPTH} levels)")
        if isinstance(value, str):
            _check_text(value, label, format_loc(loc) or "document")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):  # pydantic would say "[1]: Keys should be strings"
                    what = "a field name" if not loc else "a name"
                    where = f"{format_loc(loc)}: " if loc else ""
                    raise UserError(f"{label}: {where}key {_key_as_read(key)}: expected "
                                    f"{what} (text)")
                _check_text(key, label, format_loc(loc) or "document", "a key ")
                stack.append((item, (*loc, str(key))))
        elif isinstance(value, list):
            stack.extend((item, (*loc, i)) for i, item in enumerate(value))


def _check_text(text: str, label: str, where: str, whose: str = "") -> None:
    if "\x00" in text:
        raise UserError(f"{label}: {where}: {whose}contains a NUL character; expected plain "
                        "text")
    if not is_utf8(text):  # an escape like "\ud800": no store, hash or tokenizer takes it
        half = next(ch for ch in text if "\ud800" <= ch <= "\udfff")
        raise UserError(f"{label}: {where}: {whose}contains {half!r}, half of a UTF-16 "
                        "surrogate pair; expected plain text (a character escape like "
                        "\\U0001F600)")


def _key_as_read(key: Any) -> str:
    """A non-text key as YAML read it, with what may have been written for true/false/null."""
    if isinstance(key, bool):
        return "true (unquoted yes, on or true)" if key else "false (unquoted no, off or false)"
    if key is None:
        return "null (unquoted null, ~ or nothing)"
    return describe_value(key)


def format_loc(loc: tuple[Any, ...]) -> str:
    """`('arms', 2, 'max_draft')` -> `arms[2].max_draft`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            shown = part or "''"  # an empty key (`"": 1`) would vanish from the path
            out += f".{shown}" if out else str(shown)
    return out


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The pydantic model that owns the last element of `loc` (for field suggestions)."""
    current: Any = root
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        model = _first_model(current)
        if model is None or part not in model.model_fields:
            return None
        current = model.model_fields[part].annotation
    return _first_model(current)


def _first_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _first_model(typing.get_args(annotation)[0])
    if origin in (list, typing.Union, types.UnionType) or origin is dict:
        for arg in typing.get_args(annotation):
            found = _first_model(arg)
            if found is not None:
                return found
    return None


def _unknown_field(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    model = _model_at(root, loc)
    if model is None:
        return "unknown field"
    names = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), names, n=1)
    hint = f"did you mean '{close[0]}'? " if close else ""
    return f"unknown field ({hint}expected one of: {', '.join(names)})"


_EXPECTED = {
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "invalid_key": "expected a field name (text)",
}
_BOUND_WORDS = (("ge", "at least"), ("gt", "more than"), ("le", "at most"), ("lt", "less than"))


def _bounds(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    """`at least 0.0 and at most 10.0` for a field declared with bounds, else ''."""
    model = _model_at(root, loc) if loc else None
    field = model.model_fields.get(loc[-1]) if model and isinstance(loc[-1], str) else None
    words = [f"{word} {getattr(item, name)}" for item in (field.metadata if field else [])
             for name, word in _BOUND_WORDS if getattr(item, name, None) is not None]
    return " and ".join(words)


def _error_text(root: type[BaseModel], error: ErrorDetails) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return _unknown_field(root, tuple(error["loc"]))
    if kind in _EXPECTED:
        return f"{_EXPECTED[kind]}, got {describe_value(value)}"
    if kind == "literal_error":
        return f"expected one of {ctx['expected']}, got {describe_value(value)}"
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        word = "at least" if kind == "greater_than_equal" else "more than"
        return f"must be {word} {bound}, got {describe_value(value)}"
    if kind in ("less_than_equal", "less_than"):
        bound = ctx.get("le", ctx.get("lt"))
        word = "at most" if kind == "less_than_equal" else "less than"
        return f"must be {word} {bound}, got {describe_value(value)}"
    if kind == "finite_number":  # pydantic leaves out the range
        bounds = _bounds(root, tuple(error["loc"]))
        return f"expected a finite number{', ' + bounds if bounds else ''}, got {value}"
    if kind == "string_too_long":  # pydantic leaves out the value
        return (f"must be at most {ctx['max_length']} characters, got "
                f"{describe_value(value)} ({len(value)} characters)")
    if kind in ("too_short", "string_too_short"):
        return "must not be empty"
    if kind == "string_pattern_mismatch":  # NAME_PATTERN: 'ü' or '名' is a letter, yet refused
        letters = "letters" if str(value).isascii() else "ASCII letters (A-Z, a-z)"
        return (f"use {letters}, digits, '_', '-' and '.' only, starting with a letter or "
                f"digit, got {describe_value(value)}")
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    return str(error["msg"])


MAX_NAMED = 3  # problems one line names in full; past that it counts the rest


class Problems(UserError):
    """Several mistakes in one file or flag, one line each: `matrix validate` prints every
    line; `str()` is them in one line (`one_line_of`), as every other command says a mistake."""

    def __init__(self, label: str, lines: list[str], more: str = "") -> None:
        super().__init__(one_line_of(label, lines, more))
        self.label = label
        self.lines = lines


def one_line_of(label: str, lines: list[str], more: str = "", most: int = MAX_NAMED) -> str:
    """Problems of one file or flag in one line: up to `MAX_NAMED` in full, the label said
    once (`f.yaml: repeats: ...; also seed: ...`), then how many more and `more`, which says
    how to see them.

    Args:
        label: the file or flag each line starts with (`label: `).
        lines: the problems, one line each, at least one.
        more: how to see the problems left out, e.g. a command that lists every one.
        most: problems named in full (where nothing else lists them, as many as there are).

    Returns:
        The line.
    """
    lines = list(dict.fromkeys(lines))  # `-m a,a,a`: two duplicates read the same once flagged
    named = [lines[0], *(line.removeprefix(f"{label}: ") for line in lines[1:most])]
    text = "; also ".join(named)
    hidden = len(lines) - len(named)
    if not hidden:
        return text
    return f"{text} (+{hidden} more{'; ' + more if more else ''})"


def first_problem(root: type[BaseModel], err: ValidationError) -> tuple[str, str]:
    """The field path and the expectation of the first problem in `err`, the others after it.

    Args:
        root: the model that was validated, used to suggest field names.
        err: pydantic's error.

    Returns:
        (`arms[2].max_draft`, `must be at most 64, got 65`), with `; also seed: ...` for
        each further problem up to `MAX_NAMED`, and the rest counted with their fields.
    """
    problems = _problems(root, err)
    where, text = problems[0]
    rest = [_line("", w, t) for w, t in problems[1:]]
    return where, one_line_of("", [text, *rest], _fields_past_named(problems))


def problem_lines(label: str, root: type[BaseModel], err: ValidationError) -> list[str]:
    """Every problem in `err`, one `label: field.path: expectation` line each."""
    return [_line(label, where, text) for where, text in _problems(root, err)]


def validation_message(label: str, root: type[BaseModel], err: ValidationError) -> str:
    """One line for the problems in `err`: `label: field.path: expectation`, then each
    further one (`; also field: expectation`) up to `MAX_NAMED`, then the rest counted.

    Args:
        label: the file (or flag) the data came from.
        root: the model that was validated, used to suggest field names.
        err: pydantic's error.

    Returns:
        The message.
    """
    problems = _problems(root, err)
    return one_line_of(label, [_line(label, w, t) for w, t in problems],
                       _fields_past_named(problems))


def _problems(root: type[BaseModel], err: ValidationError) -> list[tuple[str, str]]:
    return [(format_loc(tuple(problem["loc"])), _error_text(root, problem))
            for problem in err.errors(include_url=False)]


def _line(label: str, where: str, text: str) -> str:
    return ": ".join(part for part in (label, where, text) if part)


def _fields_past_named(problems: list[tuple[str, str]]) -> str:
    """Where the problems `one_line_of` only counts are, said in place of them."""
    hidden = [where or "the whole value" for where, _ in problems[MAX_NAMED:]]
    return f"at {', '.join(hidden)}" if hidden else ""
