"""Every `specfleet ...` line in the README's and docs/'s code blocks names commands and
flags that exist: a newcomer copies them as written, and a renamed flag must fail here, not
on their machine. Each line runs with `--help` added, which parses every option and stops
before anything runs (placeholders such as MATRIX_ID or HEAD:6379 are never read).

`doc_commands` is shared: tests/bench/test_recorded_commands.py reads the benchmark records'
commands with it (their prose `code spans` and indented blocks too, and `bench/` scripts)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# `specfleet` as a command word: at a line's start, after a space or a `/` (a venv path).
COMMAND = re.compile(r"(?:^|[\s/])specfleet ((?:[a-z]|-h|--)\S*.*)$")
INDENT = "    "  # a Markdown indented code block


def _code_lines(text: str, *, prose: bool = False) -> list[str]:
    """Lines inside fenced code blocks, a trailing backslash joined to the next line; with
    `prose`, also indented code blocks and the text's `code spans` (one broken over lines
    joined by spaces)."""
    lines, fenced, indented, pending, outside, previous = [], False, False, "", [], ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced, pending, previous = not fenced, "", line
            continue
        # An indented block starts after a blank line; a list item's wrapped line does not.
        indented = (prose and not fenced and line.startswith(INDENT)
                    and (indented or not previous.strip()))
        previous = line
        if not fenced and not indented:
            outside.append(line)
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    if prose:
        for paragraph in re.split(r"\n\s*\n", "\n".join(outside)):
            lines += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", paragraph)]
    return lines


def _argv(line: str, command: re.Pattern[str] = COMMAND) -> list[str] | None:
    """The arguments after `command`'s match (its first group), comments and shell plumbing
    cut, `[...]` unwrapped."""
    code = re.split(r"\s#", line, maxsplit=1)[0].strip()
    if code.startswith("#") or not (match := command.search(code)):
        return None
    words = re.split(r"\s(?:\||&&|;|>|2>)", match.group(1), maxsplit=1)[0]
    return shlex.split(words.replace("[", " ").replace("]", " "))


def doc_commands(paths: Iterable[Path] = DOCS, command: re.Pattern[str] = COMMAND, *,
                 prose: bool = False) -> list[tuple[str, list[str]]]:
    """(where, argv) of each line of `paths` that `command` matches: fenced code blocks only,
    or with `prose` also indented blocks and code spans."""
    found = []
    for path in paths:
        for line in _code_lines(path.read_text(encoding="utf-8"), prose=prose):
            if (argv := _argv(line, command)) is not None:
                found.append((f"{path.relative_to(REPO)}: {line.strip()}", argv))
    return found


def refused_with_help(commands: Iterable[tuple[str, list[str]]]) -> list[str]:
    """Each of `doc_commands`' answers that `specfleet` refuses with `--help` added, beside
    the last line it printed."""
    failures = []
    for where, argv in commands:
        result = CliRunner().invoke(app, [*argv, "--help"])
        if result.exit_code != 0:
            failures.append(f"{where}\n    -> {result.output.strip().splitlines()[-1:]}")
    return failures


def test_every_documented_command_line_parses() -> None:
    commands = doc_commands()
    named = {argv[0] for _, argv in commands}
    assert {"generate", "bench", "matrix", "fleet", "serve", "db"} <= named, named
    failures = refused_with_help(commands)
    assert not failures, "\n".join(failures)


def test_the_extraction_reads_a_venv_path_a_continuation_and_optional_flags() -> None:
    block = ("```bash\n.venv/bin/specfleet generate -m m \\\n    --prompt-lookup  # c\n"
             "specfleet db current  [--db URL]   # note\n# specfleet not-a-command\n```\n")
    argvs = [_argv(line) for line in _code_lines(block)]
    assert argvs == [["generate", "-m", "m", "--prompt-lookup"], ["db", "current", "--db", "URL"],
                     None]


def test_the_prose_extraction_reads_indented_blocks_and_code_spans_over_two_lines() -> None:
    text = ("Ran `specfleet bench -m m\n-r 3` and `matrix show`.\n\n"
            "    specfleet replay ID \\\n        --oracle   # a note\n"
            "1. a list item\n    specfleet wrapped-prose-line, not code\n")
    argvs = [argv for line in _code_lines(text, prose=True) if (argv := _argv(line))]
    assert argvs == [["replay", "ID", "--oracle"], ["bench", "-m", "m", "-r", "3"]]
    assert _code_lines(text) == []
