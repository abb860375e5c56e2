"""Every `specfleet ...` line in the README's and docs/'s code blocks names commands and
flags that exist: a newcomer copies them as written, and a renamed flag must fail here, not
on their machine. Each line runs with `--help` added, which parses every option and stops
before anything runs (placeholders such as MATRIX_ID or HEAD:6379 are never read)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from specfleet.cli.main import app

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# `specfleet` as a command word: at a line's start, after a space or a `/` (a venv path).
COMMAND = re.compile(r"(?:^|[\s/])specfleet ((?:[a-z]|-h|--)\S*.*)$")


def _code_lines(text: str) -> list[str]:
    """Lines inside fenced code blocks, a trailing backslash joined to the next line."""
    lines, fenced, pending = [], False, ""
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced, pending = not fenced, ""
            continue
        if not fenced:
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        lines.append(pending + line)
        pending = ""
    return lines


def _argv(line: str) -> list[str] | None:
    """The arguments after `specfleet`, comments and shell plumbing cut, `[...]` unwrapped."""
    code = re.split(r"\s#", line, maxsplit=1)[0].strip()
    if code.startswith("#") or not (match := COMMAND.search(code)):
        return None
    command = re.split(r"\s(?:\||&&|;|>|2>)", match.group(1), maxsplit=1)[0]
    return shlex.split(command.replace("[", " ").replace("]", " "))


def doc_commands() -> list[tuple[str, list[str]]]:
    found = []
    for path in DOCS:
        for line in _code_lines(path.read_text(encoding="utf-8")):
            if (argv := _argv(line)) is not None:
                found.append((f"{path.relative_to(REPO)}: {line.strip()}", argv))
    return found


def test_every_documented_command_line_parses() -> None:
    commands = doc_commands()
    named = {argv[0] for _, argv in commands}
    assert {"generate", "bench", "matrix", "fleet", "serve", "db"} <= named, named
    failures = []
    for where, argv in commands:
        result = CliRunner().invoke(app, [*argv, "--help"])
        if result.exit_code != 0:
            failures.append(f"{where}\n    -> {result.output.strip().splitlines()[-1:]}")
    assert not failures, "\n".join(failures)


def test_the_extraction_reads_a_venv_path_a_continuation_and_optional_flags() -> None:
    block = ("```bash\n.venv/bin/specfleet generate -m m \\\n    --prompt-lookup  # c\n"
             "specfleet db current  [--db URL]   # note\n# specfleet not-a-command\n```\n")
    argvs = [_argv(line) for line in _code_lines(block)]
    assert argvs == [["generate", "-m", "m", "--prompt-lookup"], ["db", "current", "--db", "URL"],
                     None]
