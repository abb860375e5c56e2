"""User-facing errors: one line naming the file, field or flag and what is expected.

Raise `UserError` (or a subclass) for anything a user can fix; the CLI prints its message
as one line on stderr and exits with status 2. Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

from datetime import date
from typing import Any

INTERRUPTED_EXIT = 130  # the shell's status for a command stopped by SIGINT (or our SIGTERM)


class UserError(Exception):
    """A mistake the user can fix; `str(err)` is the whole message, one line."""

    exit_code = 2


def extra_install(extra: str) -> str:
    """How to install an optional extra, as every message says it: specfleet is installed from
    a checkout (`pip install 'specfleet[X]'` would ask PyPI for another package)."""
    return f"pip install -e '.[{extra}]' in a checkout"


MAX_MESSAGE_CHARS = 1000  # a message quoting a 100 KB value would bury what it says


def one_line(text: str) -> str:
    """`text` with every line break and other unprintable character escaped (user input such
    as a YAML key or a file name can carry them; a message must stay one line), and its middle
    cut past `MAX_MESSAGE_CHARS` (the start says what is wrong, the end what is expected)."""
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode()
                       for ch in text)
    if len(text) <= MAX_MESSAGE_CHARS:
        return text
    cut = len(text) - MAX_MESSAGE_CHARS + 40
    head = (MAX_MESSAGE_CHARS - 40) * 2 // 3
    return f"{text[:head]} ...[{cut} characters cut]... {text[head + cut:]}"


def whole_number(text: str, most: int) -> int | None:
    """`text` as a whole number in ASCII digits, or None (isdigit() alone passes '²' and
    '٣', which mean nothing here); a value past `most` reads as `most + 1` however many
    digits it has (int() refuses more than 4300)."""
    if not (text.isascii() and text.isdigit()):
        return None
    digits = text.lstrip("0") or "0"
    return int(digits) if len(digits) <= len(str(most)) else most + 1


def is_utf8(text: str) -> bool:
    """False for text holding bytes that are not UTF-8: Python reads them from a command-line
    argument or an environment value as surrogate escapes, which no file name, database,
    YAML file or tokenizer takes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def describe_value(value: Any) -> str:
    """A short description of what the user wrote, for `got ...`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "nothing (null)"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, date):  # YAML reads an unquoted 2024-01-01 so, not as text
        return f"a date ({value.isoformat()}; quote it for text)"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
