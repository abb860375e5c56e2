"""The shared options of `cli/options.py` read the same on every command that takes them."""

from __future__ import annotations

from collections import defaultdict

import typer

from specfleet.cli.main import app

# One meaning, one declaration: every command that takes one of these takes the same option.
SHARED = ("--db", "--embedded", "--require-quiet", "--no-progress", "--format", "--rate",
          "--max-width", "--engine")
# `--address` means something else where the fallback differs (parity replays locally,
# serve's fleet page shows none, leave reads no variable); `--engine` is a filter on the fleet
# commands.
OWN_MEANING = {"--address": {"parity", "serve", "fleet leave"},
               "--engine": {"bench", "results", "selftest", "job calibrate"}}


def _options() -> dict[str, dict[str, tuple]]:
    """flag -> command path -> (help, default) of every option of every command."""
    found: dict[str, dict[str, tuple]] = defaultdict(dict)

    def walk(command, path: list[str]) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])
        for param in getattr(command, "params", []):
            for flag in param.opts:
                found[flag][" ".join(path)] = (param.help, param.default)

    walk(typer.main.get_command(app), [])
    return found


def test_every_store_command_takes_the_same_db_option() -> None:
    db = _options()["--db"]
    assert len(db) >= 18 and {"results", "db upgrade", "matrix run", "serve"} <= set(db)
    assert len(set(db.values())) == 1, db


def test_a_shared_option_reads_the_same_everywhere() -> None:
    options = _options()
    for flag in (*SHARED, "--address"):
        uses = {path: spec[0] for path, spec in options[flag].items()
                if path not in OWN_MEANING.get(flag, set())}
        assert len(uses) >= 2 and len(set(uses.values())) == 1, (flag, uses)
