"""A command imports only what it uses: the root builds each command from its module when it
is asked for (`cli.main.COMMANDS`), so `specfleet fleet status` or `--version` starts in a
fraction of the second every noun's imports took (1.1 CPU-s before, each)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import COMMANDS, _module_commands, app

# Not one of these is needed to say the version or to start a fleet command (the store's
# commands still import the store, and `fleet status` Ray, when they run).
STORE_AND_MATH = ("sqlalchemy", "psycopg", "numpy", "torch", "mlx", "ray", "transformers")


def test_the_map_names_every_command_each_module_declares() -> None:
    for module in sorted(set(COMMANDS.values())):
        listed = {name for name, owner in COMMANDS.items() if owner == module}
        assert set(_module_commands(module)) == listed, module


def _modules_after(args: list[str]) -> tuple[int, set[str], str]:
    """Run `specfleet ARGS` in a fresh interpreter; its exit status, the top-level packages
    it imported and its output."""
    code = (
        "import sys\n"
        f"sys.argv = ['specfleet', *{args!r}]\n"
        "from specfleet.cli.entry import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as stop:\n"
        "    status = stop.code\n"
        "else:\n"
        "    status = 0\n"
        "print('MODULES', status, *sorted({m.split('.')[0] for m in sys.modules}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    last = done.stdout.strip().splitlines()[-1].split()
    assert last[0] == "MODULES", done.stdout + done.stderr
    return int(last[1]), set(last[2:]), done.stdout + done.stderr


@pytest.mark.parametrize("args", [["--version"], ["fleet", "--help"], ["fleet", "up", "-h"],
                                  ["fleet", "leave", "-h"], ["models", "--help"]])
def test_a_command_that_needs_no_store_imports_none_of_it(args: list[str]) -> None:
    status, modules, output = _modules_after(args)
    assert status == 0 and "specfleet" in output, output
    assert not modules & set(STORE_AND_MATH), (args, sorted(modules & set(STORE_AND_MATH)))
    assert "specfleet" in modules


def test_the_root_help_still_lists_every_command_and_a_typo_is_still_answered() -> None:
    status, _, output = _modules_after(["--help"])
    assert status == 0
    for name in COMMANDS:
        assert f"  {name} " in output, name
    status, _, output = _modules_after(["fleeet"])
    assert status == 2 and "Did you mean 'fleet'" in output, output


def test_a_sqlite_store_command_leaves_postgresqls_driver_unloaded(tmp_path) -> None:
    from specfleet.store import open_store

    with open_store(str(tmp_path / "s.db")):
        pass
    status, modules, output = _modules_after(["matrix", "list", "--db", str(tmp_path / "s.db")])
    assert status == 0 and "sqlalchemy" in modules, output
    assert "psycopg" not in modules


def test_a_list_option_shows_its_comma_list_not_a_python_type() -> None:
    # `-e, --engine <list[str]>` in every list option's help (bench, results, selftest).
    for args in (["bench", "-h"], ["results", "-h"], ["selftest", "-h"]):
        shown = CliRunner().invoke(app, args, terminal_width=200).stdout
        assert "list[str]" not in shown and "--engine <engine,...>" in shown, shown
