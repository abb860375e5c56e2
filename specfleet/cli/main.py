"""The `specfleet` command: one Typer sub-app per noun, joined here."""

from __future__ import annotations

import importlib

import click
import typer
from typer.core import TyperGroup

from specfleet.engine.config import ConfigError
from specfleet.errors import UserError


class _SpecfleetGroup(TyperGroup):
    """Turns user mistakes raised anywhere below into one stderr line and exit status 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (UserError, ConfigError) as err:
            click.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from None  # typer 0.29 vendors click: its own Exit


app = typer.Typer(
    name="specfleet",
    cls=_SpecfleetGroup,
    help="Prompt-lookup speculative decoding across a fleet, with every measurement kept.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)

# (module, attribute): each module under specfleet/cli/ owns one noun.
# A module exposing `app` becomes a group; one exposing `register(app)` adds top-level commands.
SUBCOMMANDS: list[str] = [
    "generate",
    "models",
    "db",
    "matrix",
    "job",
    "results",
    "parity",
    "report",
    "fleet",
]


def _load_subcommands() -> None:
    for name in SUBCOMMANDS:
        module = importlib.import_module(f"specfleet.cli.{name}")
        if hasattr(module, "register"):
            module.register(app)
        else:
            app.add_typer(module.app, name=name.replace("_", "-"))


_load_subcommands()


def main() -> None:
    """Console entry point."""
    app()
