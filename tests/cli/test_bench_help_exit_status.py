"""`specfleet bench -h` says every exit status (Ctrl-C's 130 included, and that what ran
stays stored for `matrix resume`) and what an omitted --engine stands for."""

from __future__ import annotations

from typer.testing import CliRunner

from specfleet.cli.main import app


def bench_help() -> str:
    result = CliRunner().invoke(app, ["bench", "-h"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return " ".join(result.stdout.split())


def test_help_names_every_exit_status() -> None:
    # It said "0 ... 1 when some failed or were interrupted"; Ctrl-C exits 130, a bad flag 2.
    shown = bench_help()
    assert "2 for a bad flag" in shown
    assert "130 after Ctrl-C (the runs done so far stay stored: `matrix resume ID` runs the " \
           "rest)" in shown


def test_help_says_what_an_omitted_engine_stands_for() -> None:
    # --engine alone among the list flags showed no default.
    shown = bench_help()
    start = shown.index("--engine <engine,...>")
    assert "default: each engine the fleet runs a model on" in shown[start:start + 200]
