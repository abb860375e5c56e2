"""A YAML file a user names (a matrix, `SPECFLEET_MODELS`, a cost table), read strictly:
YAML 1.2's numbers (YAML 1.1's other readings of `1:10`, `017`, `1_0`, `0b11` refused), no
key twice, a bounded count of values and depth, and a strict JSON file read as JSON. Every
mistake is one `UserError` line naming the file, with its line and column where YAML has them.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from specfleet.errors import UserError
from specfleet.userfiles import read_text, too_long_integer

MAX_DEPTH = 32  # a matrix nests 4 levels; anything far deeper is a mistake or an attack
MAX_NODES = 100_000  # values in one file: YAML aliases can make a small file expand to billions


class _TooManyValues(yaml.YAMLError):
    def __init__(self, mark: yaml.Mark) -> None:
        super().__init__()
        self.mark = mark


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping, an integer too long for
    Python to read (`sys.get_int_max_str_digits`), and a file of more than `MAX_NODES`
    values as it reads it. Merge keys (`<<: *base`) work."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # Counted while composing: 50 MB of list items took minutes and gigabytes to read
        # before the values were counted. A key and its value each count, hence twice.
        self.nodes += 1
        if self.nodes > 2 * MAX_NODES:
            raise _TooManyValues(self.peek_event().start_mark)
        return super().compose_node(parent, index)


_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep=False):
    if not isinstance(node, yaml.MappingNode):  # `!!map x`: node.value is no list of pairs
        raise yaml.constructor.ConstructorError(
            None, None, f"expected a mapping node, but found {node.id}", node.start_mark)
    seen: set[Any] = set()
    for key_node, value_node in node.value:
        if key_node.tag == _MERGE_TAG:  # merged fields may be overridden, so no duplicates
            loader.construct_object(value_node, deep=True)  # checks a mapping written here
            continue
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, list | dict | set):  # `? [a]`: unhashable, a TypeError below
            raise yaml.constructor.ConstructorError(
                None, None, "a list, mapping or set as a key; expected a name",
                key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)  # SafeLoader's: it applies the merges


def _construct_int(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int:
    _refuse_yaml11_reading(loader, node)
    digits = node.value.lstrip("+-").replace("_", "")
    if len(digits) > 1 and digits[0] == "0" and digits[1].isdigit() and digits.strip("0"):
        raise yaml.constructor.ConstructorError(  # YAML 1.2 (and a person) read `017` as 17
            None, None, f"{node.value!r} reads as an octal number in YAML 1.1; expected a "
            "number without a leading zero, or quotes around it for text", node.start_mark)
    try:
        return loader.construct_yaml_int(node)
    except (ValueError, IndexError):
        if len(node.value) <= sys.get_int_max_str_digits():  # `!!int abc`, `0x_`
            raise _not_a(node, "integer", "an integer") from None
        raise yaml.constructor.ConstructorError(
            None, None, f"{too_long_integer()}; expected a shorter number", node.start_mark
        ) from None


def _refuse_yaml11_reading(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> None:
    """Refuse YAML 1.1's base-60 numbers (`1:10` is 70), digits grouped with '_' (`1_0` is
    10) and binary ones (`0b11` is 3), which YAML 1.2 and a reader take for text: a typo
    silently read as another number."""
    if node.tag not in (_INT_TAG, _FLOAT_TAG):
        return
    if ":" in node.value:
        raise yaml.constructor.ConstructorError(
            None, None, f"{node.value!r} reads as a base-60 number in YAML 1.1; expected a "
            "plain number, or quotes around it for text", node.start_mark)
    if "_" in node.value or node.value.lstrip("+-").startswith("0b"):
        number = _yaml11_number(loader, node)
        if number is not None:  # else the type's own refusal says it is no number at all
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value!r} reads as the number {number} in YAML 1.1; "
                "expected a plain number (no '_', no 0b), or quotes around it for text",
                node.start_mark)


def _yaml11_number(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> int | float | None:
    """What YAML 1.1 reads `node` as; None where it reads no number (`0x_`)."""
    try:
        return (loader.construct_yaml_int(node) if node.tag == _INT_TAG
                else loader.construct_yaml_float(node))
    except (ValueError, IndexError):
        return None


def _not_a(node: yaml.Node, noun: str, expected: str) -> yaml.constructor.ConstructorError:
    """A scalar that YAML's type (its `!!` tag, or one resolved from its look) cannot read."""
    return yaml.constructor.ConstructorError(
        None, None, f"{node.value!r} is no valid {noun}; expected {expected}, or quotes "
        "around it for text", node.start_mark)


def _scalar(construct: Any, noun: str, expected: str) -> Any:
    """PyYAML's constructor of a type, its Python error on a malformed scalar (`!!bool
    maybe`, the date `2024-13-01`) made one of YAML's: a traceback otherwise."""
    def checked(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> Any:
        try:
            return construct(loader, node)
        except (ValueError, KeyError, IndexError, AttributeError):
            raise _not_a(node, noun, expected) from None
    return checked


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)
_UniqueKeyLoader.add_constructor(_INT_TAG, _construct_int)


def _construct_float(loader: _UniqueKeyLoader, node: yaml.ScalarNode) -> float:
    _refuse_yaml11_reading(loader, node)
    return loader.construct_yaml_float(node)


# YAML 1.2's exponent forms (`1e3`, `1.0e300`), which YAML 1.1 reads as text; with a dot and
# a signed exponent (`1.5e+3`) both read a number already.
_UniqueKeyLoader.add_implicit_resolver(
    _FLOAT_TAG, re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))
for _tag, _construct, _noun, _expected in (
        ("bool", yaml.SafeLoader.construct_yaml_bool, "boolean", "true or false"),
        ("float", _construct_float, "number", "a number"),
        ("timestamp", yaml.SafeLoader.construct_yaml_timestamp, "date", "a real date")):
    _UniqueKeyLoader.add_constructor(f"tag:yaml.org,2002:{_tag}",
                                     _scalar(_construct, _noun, _expected))


_ONE_DOCUMENT = "expected a single document in the stream"  # PyYAML, of a second document


class _JsonMistake(ValueError):
    """Valid JSON syntax that no file of ours may hold (a key twice, NaN)."""


def _strict_json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = next((key for i, key in enumerate(keys) if key in keys[:i]), None)
    if twice is not None:
        raise _JsonMistake(f"duplicate key {twice!r}; expected each key once")
    return dict(pairs)


def _refuse_constant(name: str) -> Any:
    raise _JsonMistake(f"{name} is no JSON number; expected a finite number")


def _as_json(text: str, label: str) -> tuple[bool, Any]:
    """(True, the document) where `text` is JSON, else (False, None) for YAML to read: PyYAML
    refuses a tab JSON allows between tokens (`jq --tab`, an editor's indent).

    Raises:
        UserError: JSON giving a key twice, or NaN or Infinity.
    """
    # Over MAX_NODES values (a comma each, about): YAML refuses them as it reads, unbuilt.
    if not text.lstrip().startswith(("{", "[")) or text.count(",") > MAX_NODES:
        return False, None
    try:
        return True, json.loads(text, object_pairs_hook=_strict_json_pairs,
                                parse_constant=_refuse_constant)
    except _JsonMistake as err:
        raise UserError(f"{label}: {err}") from None
    except (ValueError, RecursionError):  # not JSON, or one YAML says better (a deep one)
        return False, None


def read_yaml(path: Path, label: str, expected: str | None = None) -> Any:
    """Parse a YAML file; syntax errors and duplicate keys (which PyYAML would otherwise
    silently let the last one win) become one `UserError` line. A strict JSON file is read
    as JSON (the same document, tabs and all).

    Args:
        path: the YAML file.
        label: how the file is named in messages.
        expected: what the file should be, said after a refusal to read it (`read_text`).

    Returns:
        The parsed document (None for an empty file).
    """
    text = read_text(path, label, expected)
    is_json, document = _as_json(text, label)
    if is_json:
        return document
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader subclass)
    except RecursionError:
        raise UserError(f"{label}: nested too deeply (at most {MAX_DEPTH} levels)") from None
    except _TooManyValues as err:
        raise UserError(f"{label}: more than {MAX_NODES} values by line {err.mark.line + 1}; "
                        "expected a far shorter file") from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = err.problem or err.context or "invalid YAML"
        if err.context == _ONE_DOCUMENT:  # PyYAML's problem reads "but found another document"
            problem = "a second document starts here; expected one document (no '---' after it)"
        raise UserError(f"{label}: {where}YAML syntax error: {problem}") from None
    except yaml.reader.ReaderError as err:  # its own text spans lines and names no line
        line = text.count("\n", 0, err.position) + 1
        column = err.position - (text.rfind("\n", 0, err.position) + 1) + 1
        raise UserError(f"{label}: line {line}, column {column}: character U+{err.character:04X} "
                        "(a control character) is not allowed in YAML; expected printable text "
                        "(in double quotes, an escape such as \\x01 writes it)") from None
    except yaml.YAMLError as err:
        raise UserError(f"{label}: YAML syntax error: {err}") from None
