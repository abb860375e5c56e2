"""Every command a benchmark record ran (docs/benchmark_results/, its folders' READMEs too)
can be run again today: each `specfleet ...` and `python SCRIPT.py ...` of a record's code
blocks and its prose's code spans parses as with `--help` (its options exist and take the
arguments given; values are not read, nothing loads or runs), and each file of the checkout
it names exists. A record is never rewritten: a command since renamed keeps its words, is
listed in SUPERSEDED, and its record says today's form in a `(today: ...)` note."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from tests.bench.test_script_options import script_parser
from tests.test_doc_commands import COMMAND, REPO, doc_commands, refused_with_help

RECORDS = sorted((REPO / "docs" / "benchmark_results").glob("**/*.md"))
# A script `python` runs, or a `bench/` script named with its arguments in prose
# (`bench/families.py falcon_h1`); `bench/NAME.py` is a placeholder, `-m pytest` no script.
SCRIPT = re.compile(r"(?:^|[\s/])(?:python3? (?=[a-z0-9_./-]+\.py)|(?=bench/\w+\.py \S))"
                    r"([a-z0-9_./-]+\.py\b.*)$")
# Options whose value is a file the command writes, not one it reads.
OUTPUTS = {"--out", "--json", "--report-dir", "--logs"}
ELIDED = "..."
SUPERSEDED = {
    # configs/ moved into the package (0077c1d); the note gives the matrix as run.
    "docs/benchmark_results/demo-2026-11-29/README.md: "
    "specfleet matrix run configs/matrices/demo.yaml --report-dir reports",
}


def missing_files(argv: list[str]) -> list[str]:
    """The checkout's files `argv` names (a relative path with a `/`, alone or in a comma
    list) that are not there; an output option's value is not read."""
    missing = []
    for at, word in enumerate(argv):
        if (at and argv[at - 1] in OUTPUTS) or word.startswith(("/", "~", "$", "-")) or "://" in word:
            continue
        missing += [p for p in word.split(",") if "/" in p and not (REPO / p).exists()]
    return missing


def script_refusal(argv: list[str], monkeypatch, capsys) -> str | None:
    """Why `python argv...` would not parse today, or None; a `bench/` script's parser
    reads option names and arity, and a closed set of choices, as `--help` would."""
    path, args = argv[0], argv[1:]
    if not (REPO / path).is_file():
        return f"no script {path}"
    if not path.startswith("bench/"):
        return None  # tools/ and a record's own script: the file is checked, not its options
    parser = script_parser(Path(path).stem, monkeypatch)
    for action in parser._actions:
        if action.choices is None:
            action.type = None  # a placeholder (PROMPTS) or a file on the box that ran it
    if ELIDED in args:
        unknown = [a for a in args
                   if a.startswith("-") and a.split("=")[0] not in parser._option_string_actions]
        return f"no option {', '.join(unknown)}" if unknown else None
    try:
        _, extra = parser.parse_known_args(args)  # script_parser replaced parse_args
    except SystemExit:
        return capsys.readouterr().err.strip()
    return f"unrecognized arguments: {' '.join(extra)}" if extra else None


def test_every_recorded_specfleet_command_parses() -> None:
    commands = doc_commands(RECORDS, COMMAND, prose=True)
    assert {argv[0] for _, argv in commands} >= {"bench", "matrix", "replay", "report"}
    failures = refused_with_help(commands)
    failures += [f"{where}\n    -> no file {', '.join(missing)}" for where, argv in commands
                 if (missing := missing_files(argv))]
    stale = [f for f in failures if f.split("\n")[0] in SUPERSEDED]
    assert len(stale) == len(SUPERSEDED), f"a SUPERSEDED command parses again: {stale}"
    assert all("(today:" in (REPO / where.split(": ")[0]).read_text() for where in SUPERSEDED)
    assert not set(failures) - set(stale), "\n".join(sorted(set(failures) - set(stale)))


def test_every_recorded_script_command_parses(monkeypatch, capsys) -> None:
    commands = doc_commands(RECORDS, SCRIPT, prose=True)
    scripts = {Path(argv[0]).stem for _, argv in commands}
    assert {"policies", "policy_variants", "families", "store"} <= scripts, scripts
    failures = []
    for where, argv in commands:
        why = script_refusal(argv, monkeypatch, capsys) or (
            f"no file {', '.join(missing)}" if (missing := missing_files(argv[1:])) else None)
        if why:
            failures.append(f"{where}\n    -> {why}")
    assert not failures, "\n".join(failures)


def test_families_without_a_family_runs_every_family(monkeypatch) -> None:
    # The record's `.venv/bin/python bench/families.py` was refused: "argument FAMILY:
    # invalid choice: ['llama', ...]" (argparse's choices checked the list default).
    from specfleet.engine.runners.tiny_torch import TINY_FAMILIES  # torch: only where needed

    parser = script_parser("families", monkeypatch)
    assert parser.parse_known_args([]) == (argparse.Namespace(
        families=list(TINY_FAMILIES), prompts=8, recurrent=None), [])
    assert parser.parse_known_args(["mamba", "jamba"])[0].families == ["mamba", "jamba"]


def test_the_script_pattern_reads_commands_not_mentions() -> None:
    lines = {".venv/bin/python bench/store.py --repeats 5": ["bench/store.py", "--repeats", "5"],
             "bench/families.py falcon_h1": ["bench/families.py", "falcon_h1"],
             "bench/policies_prompts.py": None, "python bench/NAME.py -h": None,
             "python -m pytest -q tests/bench/test_cli_args.py": None}
    for text, argv in lines.items():
        match = SCRIPT.search(text)
        assert (match.group(1).split() if match else None) == argv, text
