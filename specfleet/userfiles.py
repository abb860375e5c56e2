"""Files and folders a user names (a matrix, a prompt file, `SPECFLEET_MODELS`, `--out`,
`SPECFLEET_HOME`): read one as text (YAML: `yamlfiles.read_yaml`), or check a folder before
any work starts.

Every mistake is one `UserError` line naming the path and what is expected. Only regular
files are opened: a named pipe blocks until a writer comes and a device may never end.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import json
import os
import stat
import sys
import tempfile
import unicodedata
from pathlib import Path
from typing import Any, BinaryIO

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


def sync_folder(folder: Path) -> None:
    """fsync a folder: a name just made or renamed in it survives a crash or a power loss."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


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
