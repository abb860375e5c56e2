"""The bench scripts' command lines: a bad value is refused in one line that names the option
and what is expected, exit status 2, no traceback (as `specfleet` refuses one, STYLE.md 8).

`BenchParser` is argparse without the usage block before its error line; `whole_number`
(`positive_int`) and `names_in` make `type=` converters; `run_main` turns a specfleet
`UserError` (an unknown model alias, a missing store) into that one line, and Ctrl-C too.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Collection
from typing import NoReturn

USAGE_ERROR = 2  # as argparse, click and `specfleet` exit on a bad command line
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C stopped


class BenchParser(argparse.ArgumentParser):
    """argparse whose refusal is one line: `peers.py: error: argument --repeats: ...`."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message} (see --help)\n")


def whole_number(least: int = 1, most: int | None = None) -> Callable[[str], int]:
    """A `type=` converter for a count from `least` to `most` (no upper bound: None)."""
    expected = f"from {least} to {most}" if most is not None else f"of at least {least}"

    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = least - 1
        if value < least or (most is not None and value > most):
            raise argparse.ArgumentTypeError(f"expected a whole number {expected}, got {text!r}")
        return value

    return check


# Repeats, new tokens, prompts per family: at least one.
positive_int = whole_number()


def numbers_at_least_zero(text: str) -> list[float]:
    """A `type=` converter for a comma list of finite numbers >= 0 (`0,0.05,0.1`)."""
    try:
        values = [float(item) for item in text.split(",")]
    except ValueError:
        values = [-1.0]
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected a comma list of numbers >= 0, got {text!r}")
    return values


def names_in(choices: Collection[str]) -> Callable[[str], str]:
    """A comma list whose every item is one of `choices`; returned as given (comma-joined)."""

    def check(text: str) -> str:
        items = text.split(",")
        unknown = [item for item in items if item not in choices]
        if unknown or not text:
            got = ", ".join(repr(item) for item in unknown) or repr(text)
            raise argparse.ArgumentTypeError(
                f"expected a comma list of {', '.join(choices)}; got {got}")
        return text

    return check


def one_per(parser: argparse.ArgumentParser, flag: str, values: list, per_flag: str,
            per_values: list) -> None:
    """Refuse a repeated option given another number of times than the one it pairs with
    (`--db A --matrix M1 --db B` would pair B with nothing)."""
    if len(values) != len(per_values):
        parser.error(f"argument {flag}: expected one per {per_flag} ({len(per_values)}), "
                     f"got {len(values)}")


def run_main(main: Callable[[], int | None]) -> NoReturn:
    """Exit with `main()`'s status; a user mistake specfleet found, or Ctrl-C, is one line."""
    from specfleet.errors import UserError

    try:
        status = main()
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        status = USAGE_ERROR
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        status = INTERRUPTED
    raise SystemExit(status)
