"""Query parameters of the web view, checked strictly: a bad one is a 400 with one line."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

from starlette.datastructures import QueryParams

from specfleet.engine.kinds import DEVICES, ENGINES
from specfleet.errors import whole_number
from specfleet.jobs.run import Arm
from specfleet.settings import host_name_problem
from specfleet.store.tables import ID_CHARS

ARMS = get_args(Arm)
TARGET_EXPECTED = (f"expected HOST, HOST/ENGINE or HOST/ENGINE/DEVICE with ENGINE one of "
                   f"{', '.join(ENGINES)} and DEVICE one of {', '.join(DEVICES)}")


class BadParameter(Exception):
    """A query parameter the user got wrong; `str(err)` is the one line the 400 says."""


class NotFound(Exception):
    """A matrix, cell, page or download that is not there (404 page with a link back)."""


# Past this a page's OFFSET overflows SQLite's 64-bit integer (a 500, not a 400).
MAX_PAGE = 1_000_000
MAX_COUNT = 100_000  # rows a page may ask for
MAX_ID_CHARS = ID_CHARS  # no stored matrix or job id is longer
MAX_TEXT_CHARS = 256  # a model, prompt or host name a query parameter may hold


def page_number(value: str) -> int:
    number = whole_number(value, MAX_PAGE)
    if number is None or not 1 <= number <= MAX_PAGE:
        raise ValueError(f"expected a whole number from 1 to {MAX_PAGE}")
    return number


def count_or_all(value: str) -> int | None:
    if value == "all":
        return None
    number = whole_number(value, MAX_COUNT)
    if number is None or not 1 <= number <= MAX_COUNT:
        raise ValueError(f"expected a whole number from 1 to {MAX_COUNT}, or all")
    return number


def flag(value: str) -> bool:
    if value not in ("0", "1", "true", "false"):
        raise ValueError("expected 1, 0, true or false")
    return value in ("1", "true")


def arm(value: str) -> str:
    if value not in ARMS:
        raise ValueError(f"expected one of {', '.join(ARMS)}")
    return value


def text(value: str) -> str:
    # PostgreSQL refuses to compare a NUL (a 500); no stored name or id holds one.
    if not value or len(value) > MAX_TEXT_CHARS or "\x00" in value:
        raise ValueError(f"expected 1 to {MAX_TEXT_CHARS} characters, none of them NUL")
    return value


def name_part(value: str) -> str | None:
    if len(value) > MAX_TEXT_CHARS or "\x00" in value:
        raise ValueError(f"expected at most {MAX_TEXT_CHARS} characters, none of them NUL")
    return value or None  # an emptied form field: every matrix again


def stored_id(value: str, what: str, lister: str) -> str:
    """A matrix or job id from a path, when the store could hold it.

    Raises:
        NotFound: an id past the id columns' width (cut in the line, not echoed whole) or
            with a NUL (PostgreSQL refuses to compare one: a 500).
    """
    if len(value) > MAX_ID_CHARS or "\x00" in value:
        cut = "..." if len(value) > MAX_ID_CHARS else ""
        raise NotFound(f"no {what} {value[:MAX_ID_CHARS]!r}{cut}; expected an id of at most "
                       f"{MAX_ID_CHARS} characters without NUL, as `specfleet {lister}` shows")
    return value


def target(value: str) -> str:
    parts = value.split("/")
    if len(parts) > 3 or any(part not in known
                             for part, known in zip(parts[1:3], (ENGINES, DEVICES), strict=False)):
        raise ValueError(TARGET_EXPECTED)
    host = parts[0]  # any other host is checked against the stored ones (`history_page`)
    if not host or len(host) > MAX_TEXT_CHARS or "\x00" in host:
        raise ValueError(f"HOST: {host_name_problem(host)}")
    return value


Parser = Callable[[str], Any]


def parse(query: QueryParams, allowed: dict[str, Parser],
          required: tuple[str, ...] = ()) -> dict[str, Any]:
    """Check every query parameter against `allowed` (name -> parser).

    Returns:
        The parsed values of the parameters given.

    Raises:
        BadParameter: an unknown parameter, one given twice, a missing required one, or a
            value its parser refuses (the line names the parameter and what is expected).
    """
    names = [name for name, _ in query.multi_items()]
    for name in names:
        if name not in allowed:
            expected = ", ".join(allowed) or "none"
            raise BadParameter(f"unknown query parameter {name[:80]!r}; expected {expected}")
        if names.count(name) > 1:  # else the last one would win without a word
            raise BadParameter(f"query parameter {name!r} given twice; expected it once")
    for name in required:
        if name not in query:
            optional = [other for other in allowed if other not in required]
            rest = f", and optionally {_listed(optional)}" if optional else ""
            raise BadParameter(f"query parameter {name!r} is required; expected "
                               f"{_listed(list(required))}{rest}")
    out = {}
    for name, value in query.items():
        try:
            out[name] = allowed[name](value)
        except ValueError as err:
            raise BadParameter(f"query parameter {name}={value[:80]!r}: {err}") from None
    return out


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
