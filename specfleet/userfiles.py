"""Files and folders a user names (a matrix, a prompt file, `SPECFLEET_MODELS`, `--out`,
`SPECFLEET_HOME`): read one as text or YAML, or check a folder before any work starts.

Every mistake is one `UserError` line naming the path and what is expected. Only regular
files are opened: a named pipe blocks until a writer comes and a device may never end.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import json
import os
import re
import stat
import sys
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, BinaryIO

import yaml

from specfleet.errors import UserError, describe_value
from specfleet.settings import expand_user

_KINDS = (
    (stat.S_ISREG, "a file"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of(mode: int) -> str:
    """`a file`, `a directory`, `a named pipe (FIFO)`, ... for an `st_mode`."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


MAX_TEXT_BYTES = 64 * 2**20  # a batch of 30000 prompts of 2 KB fits; more is a mistake
STDIN = "-"  # a file name that means standard input (`generate -p -`, `job generate --prompts -`)
MAX_DEPTH = 32  # a matrix nests 4 levels; anything far deeper is a mistake or an attack
MAX_NODES = 100_000  # values in one file: YAML aliases can make a small file expand to billions


def too_long_integer() -> str:
    """What is wrong with a number int() will not read (over `sys.get_int_max_str_digits`,
    4300 digits by default), for a YAML or JSON reader's one line."""
    return f"an integer of more than {sys.get_int_max_str_digits()} digits"


def json_object(raw: bytes | str, expected: str = "a JSON object"
                ) -> tuple[dict[str, Any], None] | tuple[None, str]:
    """`raw` read as a JSON object: (the object, None), or (None, why it is none, ending in
    `expected`), for a message that names the file before it."""
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as err:
        return None, (f"not JSON ({err.msg} at line {err.lineno} column {err.colno}); "
                      f"expected {expected}")
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 text (byte {err.start}); expected {expected}"
    except RecursionError:
        return None, f"nested too deeply; expected {expected}"
    except ValueError:  # int() of 4300+ digits
        return None, f"{too_long_integer()}; expected {expected}"
    if not isinstance(data, dict):
        return None, f"expected {expected}, got {describe_value(data)}"
    return data, None


# The longest matrix or job name and model alias or path a run carries: within the store's
# column widths (store/tables.py).
MAX_NAME_LEN = 128
MAX_MODEL_LEN = 256


def name_problem(text: str) -> str | None:
    """Why `text` cannot be a name people read (a model alias, a cost table's title), or None:
    it is blank, or holds a character that does not print (a NUL, a control character, a
    bidirectional override that reorders what follows it on screen).

    Returns:
        `'' is blank`, `'a\\x01' holds U+0001, which does not print`, ...; None when fine.
    """
    if not text.strip():
        return f"{text!r} is blank"
    odd = next((ch for ch in text if not ch.isprintable() and ch != " "), None)
    if odd is None:
        return None
    called = unicodedata.name(odd, "")
    return (f"{describe_value(text)} holds U+{ord(odd):04X}{f' ({called})' if called else ''}, "
            "which does not print")


def given_path(text: str, label: str, expected: str) -> Path:
    """A path the user typed, refused in one line when blank: `Path('')` is the current
    folder, where a script's unset variable would otherwise send the work.

    Args:
        text: the path as given.
        label: the flag or argument that gave it (`--out`).
        expected: what it should name (`a folder path`).

    Returns:
        `Path(text)`, nothing expanded.
    """
    if not text.strip():
        raise UserError(f"{label} {text!r} is blank; expected {expected}")
    path = Path(text)  # drops a trailing "/", which names a folder (`cat file/` fails)
    refuse_unreachable(path, label)
    if text.endswith(("/", os.sep)):
        try:
            mode = os.stat(path).st_mode
        except OSError:  # not there or not readable: the reader says which
            return path
        if not stat.S_ISDIR(mode):
            raise UserError(f"{label} {text!r}: a trailing '/' names a folder, but {path} is "
                            f"{kind_of(mode)}; expected {expected}")
    return path


def output_folder(text: str, label: str, purpose: str) -> Path:
    """A folder the user names to write into (`report --out`), of which only the last is made:
    a typo higher up would otherwise make a whole tree from `/`. A leading `~` or `~USER` is
    expanded, as in `--db` and the `SPECFLEET_*` paths, where the shell left it (quoted).

    Args:
        text: the path as given.
        label: the flag that gave it (`--out`).
        purpose: what the folder is for (`a folder to write the record in`).

    Returns:
        The folder's path; it may not exist yet, but the folder it goes in does.

    Raises:
        UserError: blank, an unknown `~USER`, a file in the way, or a folder above it missing.
    """
    if text.startswith("~"):
        home = str(expand_user(text, label))
        text = os.path.join(home, "") if text.endswith("/") else home  # the '/' checked below
    path = given_path(text, label, "a folder path")
    check_last_folder_only(path, label, purpose)
    return path


def check_last_folder_only(path: Path, label: str, purpose: str) -> None:
    """Refuse a folder to be made whose own folder does not exist (a typo higher up would
    make a whole tree), or with a file in the way (`check_folder_path`).

    Raises:
        UserError: `label PATH: its folder ... does not exist; expected PURPOSE, inside an
            existing one`.
    """
    existing = check_folder_path(path, label)
    if existing not in (path, path.parent):
        raise UserError(f"{label} {path}: its folder {path.parent} does not exist; expected "
                        f"{purpose}, inside an existing one")


def refuse_unreachable(path: Path, label: str) -> None:
    """One line for a path the system will not look up: a name past 255 bytes (ENAMETOOLONG),
    or a folder on the way that denies a look inside (EACCES: mode 000, another user's).
    pathlib's checks raise both where they return False for a missing file."""
    try:
        os.stat(path)
    except UnicodeEncodeError as err:  # a YAML escape ("\ud800") no file name can encode
        raise UserError(f"{label}: {describe_value(str(path))} holds "
                        f"U+{ord(err.object[err.start]):04X}, half of a UTF-16 surrogate pair, "
                        "which no file name can; expected a path of UTF-8 text") from None
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            raise UserError(f"{label}: {describe_value(str(path))}: the name is too long "
                            "(ENAMETOOLONG); expected a path of names up to 255 bytes each"
                            ) from None
        if err.errno == errno.EACCES:
            shut = next((p for p in path.parents if os.path.exists(p)), path.parent)
            raise UserError(f"{label}: {path}: cannot look inside {shut} (permission denied); "
                            "expected a path through folders you may enter") from None


def read_text(path: Path, label: str, expected: str | None = None) -> str:
    """Read a UTF-8 text file the user named, or raise one `UserError` line naming it.

    At most `MAX_TEXT_BYTES` are read; a larger file, UTF-16, other non-UTF-8 bytes and a
    NUL byte are refused. A UTF-8 byte-order mark is dropped (it is no content).

    Args:
        path: the file to read.
        label: how the file is named in messages (the path as the user gave it, or the
            flag or variable that named it).
        expected: what the file should be, said after a refusal (default: a regular file).

    Returns:
        The file's text (universal newlines, as `Path.read_text`).
    """
    want = f"; expected {expected}" if expected else ""
    try:
        kind = kind_of(path.stat().st_mode)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UserError(f"{label}: is a dangling link{want or '; expected a regular file'}"
                            ) from None
        raise UserError(f"{label}: no such file{want}") from None
    except OSError as err:
        raise UserError(f"{label}: cannot read ({err.strerror}){want}") from None
    if kind != "a file":
        raise UserError(f"{label}: is {kind}; expected {expected or 'a regular file'}")
    try:
        # O_NONBLOCK: a pipe put in its place since the stat cannot make the open wait.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as handle:
            now = kind_of(os.fstat(fd).st_mode)
            if now != "a file":
                raise UserError(f"{label}: is {now}; expected {expected or 'a regular file'}")
            data = handle.read(MAX_TEXT_BYTES + 1)
    except OSError as err:
        raise UserError(f"{label}: cannot read ({err.strerror}){want}") from None
    return _decode(data, label, want)


def standard_input() -> BinaryIO | None:
    """This process's standard input as bytes; None where it started without one (`<&-`)."""
    return getattr(sys.stdin, "buffer", None)


def read_stream(stream: BinaryIO | None, label: str, expected: str | None = None) -> str:
    """Read what the user piped in (standard input) as `read_text` reads a file: UTF-8, no
    NUL byte, at most `MAX_TEXT_BYTES`; else one `UserError` line naming it.

    Args:
        stream: the bytes to read; None where the process started without standard input
            (`<&-`).
        label: how the input is named in messages (`--prompt -`).
        expected: what it should be, said after a refusal (default: UTF-8 text).

    Returns:
        The text (universal newlines).
    """
    want = f"; expected {expected}" if expected else ""
    if stream is None:
        raise UserError(f"{label}: standard input is closed{want or '; expected UTF-8 text'}")
    try:
        data = stream.read(MAX_TEXT_BYTES + 1)
    except OSError as err:
        raise UserError(f"{label}: cannot read standard input ({err.strerror}){want}") from None
    return _decode(data, label, want)


def _decode(data: bytes, label: str, want: str) -> str:
    if len(data) > MAX_TEXT_BYTES:
        most = f"{MAX_TEXT_BYTES // 2**20} MiB"
        raise UserError(f"{label}: larger than {most}, more than specfleet reads"
                        f"{want or f'; expected a file of at most {most}'}")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise UserError(f"{label}: not UTF-8 text (byte 0): it starts with a UTF-16 "
                        f"byte-order mark{want or '; expected UTF-8 text'}")
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as err:
        raise UserError(f"{label}: not UTF-8 text (byte {err.start})"
                        f"{want or '; expected UTF-8 text'}") from None
    nul = data.find(0)
    if nul >= 0:
        raise UserError(f"{label}: a NUL byte at byte {nul}, so not text"
                        f"{want or '; expected a text file'}")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def check_folder_path(path: Path, label: str) -> Path:
    """Refuse a folder path whose nearest existing part is not a folder.

    Args:
        path: the folder (it may not exist yet).
        label: the flag or variable naming it in messages (`--out`, `SPECFLEET_HOME`).

    Returns:
        The nearest part of `path` that exists (`path` itself when it exists).
    """
    refuse_unreachable(path, label)
    probe = path
    while not os.path.exists(probe):
        if probe.is_symlink():
            raise UserError(f"{label}: {probe} is a dangling link; expected a folder")
        probe = probe.parent
    kind = kind_of(probe.stat().st_mode)
    if kind != "a directory":
        inside = "" if probe == path else f", so {path} cannot be made inside it"
        raise UserError(f"{label}: {probe} is {kind}, not a folder{inside}; expected a folder")
    if not os.access(probe, os.X_OK):  # mode 000: every later look inside it would raise
        raise UserError(f"{label}: {probe} is a folder you may not enter (permission denied); "
                        "expected a folder you may enter")
    return probe


def check_writable_dir(path: Path, flag: str) -> None:
    """Refuse an output folder that cannot be created or written, before any work starts.

    A real folder is made and removed beside where the output goes: permission bits say
    nothing to root, nor about /proc or a read-only mount.

    Args:
        path: the folder (it may not exist yet).
        flag: the option naming it in messages (`--out`, `--report-dir`).
    """
    existing = check_folder_path(path, flag)
    try:
        probe = tempfile.mkdtemp(prefix=".specfleet-probe-", dir=existing)
    except OSError as err:
        what = f"write in {path}" if existing == path else \
            f"create {path} (making a folder in {existing} fails)"
        raise UserError(f"{flag}: cannot {what}: {err.strerror}; expected a folder you can "
                        "write") from None
    with contextlib.suppress(OSError):
        os.rmdir(probe)


def check_output_file(path: Path) -> None:
    """Refuse a file to be written whose name is taken by anything but a file (a folder, a
    named pipe that would block the write, a link that leads nowhere), before any is written.

    Args:
        path: the file to be (over)written.
    """
    try:
        kind = kind_of(os.stat(path).st_mode)
    except FileNotFoundError:
        if os.path.islink(path):
            raise UserError(f"{path}: is a dangling link; expected a file to replace or "
                            "nothing") from None
        return
    except OSError as err:
        raise UserError(f"{path}: cannot be written ({err.strerror}); expected a file to "
                        "replace or nothing") from None
    if kind != "a file":
        raise UserError(f"{path}: is {kind}; expected a file to replace or nothing")
    if not os.access(path, os.W_OK):  # its owner made it read-only: keep it
        raise UserError(f"{path}: is read-only; expected a file to replace or nothing")


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
