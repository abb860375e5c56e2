"""The `SPECFLEET_*` variables: each declared once, read by its typed reader, and listed in
docs/architecture.md exactly as declared."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from specfleet import settings
from specfleet.errors import UserError
from specfleet.settings import (
    FORCE_SYNC,
    HOME,
    HOST,
    HOST_NAME_EXPECTED,
    JOURNAL_DIR,
    LEASE_S,
    OPENBLAS,
    RUNTIME_DIR,
    SELFTEST,
    STORE_RETRY_S,
    THREADS,
    VARIABLES,
    Seconds,
    Variable,
)

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "specfleet"
DOC = ROOT / "docs" / "architecture.md"


def docs_rows() -> list[str]:
    section = DOC.read_text().split("## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if line.startswith("| `SPECFLEET_")]


def test_the_docs_table_is_the_declared_variables() -> None:
    expected = [f"| `{v.name}` | {v.meaning} | {v.default} |" for v in VARIABLES]
    assert docs_rows() == expected, \
        "docs/architecture.md 'Environment variables' should list:\n" + "\n".join(expected)


def test_variables_holds_every_declaration_once_in_name_order() -> None:
    declared = [v for v in vars(settings).values() if isinstance(v, Variable)]
    assert sorted(v.name for v in declared) == [v.name for v in VARIABLES]
    assert all(v.name.startswith("SPECFLEET_") and "\n" not in v.meaning for v in VARIABLES)


def test_every_variable_the_package_names_is_declared() -> None:
    named = {name for path in PACKAGE.rglob("*.py")
             for name in re.findall(r"SPECFLEET_[A-Z_]*[A-Z]", path.read_text())}
    assert named <= {v.name for v in VARIABLES}


def test_no_module_but_settings_spells_a_variable_as_a_string() -> None:
    quoting = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
               if re.search(r"""["']SPECFLEET_[A-Z_]+["']""", path.read_text())}
    assert quoting == {"settings.py"}


def test_settings_imports_only_the_standard_library_and_errors() -> None:
    tree = ast.parse((PACKAGE / "settings.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    outside = {name for name in imported if name and name.split(".")[0] not in
               sys.stdlib_module_names and name != "__future__"}
    assert outside == {"specfleet.errors"}


@pytest.mark.parametrize("variable", [v for v in VARIABLES if isinstance(v, Seconds)])
def test_seconds_say_their_default_and_range_as_declared(variable: Seconds) -> None:
    assert variable.default == \
        f"{variable.default_s:g} s ({variable.low_s:g}-{variable.high_s:g} s)"
    assert variable.read({}) == variable.read({variable.name: ""}) == variable.default_s
    assert variable.read({variable.name: "2.5"}) == 2.5


@pytest.mark.parametrize("variable, raw, message", [
    (LEASE_S, "0", "SPECFLEET_LEASE_S: expected seconds between 1 and 3600, got '0'"),
    (LEASE_S, "nan", "SPECFLEET_LEASE_S: expected seconds between 1 and 3600, got 'nan'"),
    (LEASE_S, "99999", "SPECFLEET_LEASE_S: expected seconds between 1 and 3600, got '99999'"),
    (LEASE_S, "soon", "SPECFLEET_LEASE_S: expected seconds between 1 and 3600, got 'soon'"),
    (STORE_RETRY_S, "-5",
     "SPECFLEET_STORE_RETRY_S: expected seconds between 1 and 86400, got '-5'"),
    (STORE_RETRY_S, "inf",
     "SPECFLEET_STORE_RETRY_S: expected seconds between 1 and 86400, got 'inf'"),
    (THREADS, "0", "SPECFLEET_THREADS: expected a whole number between 1 and 4096, got '0'"),
    (THREADS, "2.5", "SPECFLEET_THREADS: expected a whole number between 1 and 4096, got '2.5'"),
    (THREADS, "-1", "SPECFLEET_THREADS: expected a whole number between 1 and 4096, got '-1'"),
    (THREADS, "\u00b2", "SPECFLEET_THREADS: expected a whole number between 1 and 4096, "
                    "got '\u00b2'"),  # a digit to isdigit(), not to int(): a ValueError
    (THREADS, "\u0661\u0662", "SPECFLEET_THREADS: expected a whole number between 1 and 4096, "
                            "got '\u0661\u0662'"),
    (THREADS, "9" * 5000, "SPECFLEET_THREADS: expected a whole number between 1 and 4096, "
                         f"got '{'9' * 5000}'"),
    (HOST, "my host", f"SPECFLEET_HOST: expected {HOST_NAME_EXPECTED}, got 'my host'"),
    (HOST, "a" * 64, f"SPECFLEET_HOST: expected {HOST_NAME_EXPECTED}, got {'a' * 64!r}"),
    # Ray refuses each as a label value; `$` let the newline through.
    (HOST, "h-", f"SPECFLEET_HOST: expected {HOST_NAME_EXPECTED}, got 'h-'"),
    (HOST, "h.", f"SPECFLEET_HOST: expected {HOST_NAME_EXPECTED}, got 'h.'"),
    (HOST, "h\n", f"SPECFLEET_HOST: expected {HOST_NAME_EXPECTED}, got 'h\\n'"),
    # float() reads these; no other number here does.
    (LEASE_S, "\u0663", "SPECFLEET_LEASE_S: expected seconds between 1 and 3600, got '\u0663'"),
    (LEASE_S, "1_0", "SPECFLEET_LEASE_S: expected seconds between 1 and 3600, got '1_0'"),
    # A path of spaces was a folder named ' ' wherever the command ran.
    (HOME, " ", "SPECFLEET_HOME: ' ' is blank; expected a path, or SPECFLEET_HOME unset for "
                "the user cache dir"),
    (JOURNAL_DIR, "/tmp/j ", "SPECFLEET_JOURNAL_DIR: '/tmp/j ' starts or ends with "
                             "whitespace; expected a path, or SPECFLEET_JOURNAL_DIR unset for "
                             "journal/ in the user data dir"),
    # Each process would look for the machine lock under its own current folder.
    (RUNTIME_DIR, "rt", "SPECFLEET_RUNTIME_DIR: 'rt' is not an absolute path; expected a path "
                        "starting with /"),
    (RUNTIME_DIR, "~/rt", "SPECFLEET_RUNTIME_DIR: '~/rt' is not an absolute path; expected a "
                          "path starting with /"),
])
def test_a_malformed_value_is_one_line_naming_the_variable(variable, raw, message) -> None:
    with pytest.raises(UserError) as err:
        variable.read({variable.name: raw})
    assert str(err.value) == message


def test_readers_of_each_kind() -> None:
    assert THREADS.read({}) is None and THREADS.read({THREADS.name: "8"}) == 8
    assert HOST.read({HOST.name: "solo"}) == "solo" and HOST.read({HOST.name: ""}) is None
    assert SELFTEST.read({}) and SELFTEST.read({SELFTEST.name: ""})
    assert not SELFTEST.read({SELFTEST.name: "0"})
    assert FORCE_SYNC.read({FORCE_SYNC.name: ""}) and not FORCE_SYNC.read({})
    assert not FORCE_SYNC.read({FORCE_SYNC.name: "0"})  # `=0` turned sync on: the opposite
    assert HOME.read({HOME.name: "~/sf"}) == Path.home() / "sf"
    assert HOME.read({HOME.name: ""}) is None


def test_host_names_as_ray_takes_them() -> None:
    assert HOST.read({HOST.name: "a" * 63}) == "a" * 63
    assert HOST.read({HOST.name: "H_1.x-2"}) == "H_1.x-2"
    assert HOST.read({HOST.name: "h"}) == "h"


def test_a_switch_is_off_at_0_false_no_or_off_and_never_refuses_a_value() -> None:
    # SPECFLEET_OPENBLAS is read as specfleet is imported: a UserError was a traceback.
    assert OPENBLAS.read({OPENBLAS.name: "\udcff"})
    assert not OPENBLAS.read({OPENBLAS.name: " 0 "})  # as a Presence reads it
    # `=false` turned the self-test and OpenBLAS on, and forced the loop synchronous.
    for off in ("false", "False", "no", " OFF "):
        assert not OPENBLAS.read({OPENBLAS.name: off}) and not SELFTEST.read({SELFTEST.name: off})
        assert not FORCE_SYNC.read({FORCE_SYNC.name: off})
    for on in ("", "1", "true", "yes", "on"):
        assert OPENBLAS.read({OPENBLAS.name: on}) and FORCE_SYNC.read({FORCE_SYNC.name: on})
    assert OPENBLAS.read({}) and not FORCE_SYNC.read({})


def test_a_reader_reads_the_process_environment_by_default(monkeypatch) -> None:
    monkeypatch.setenv(LEASE_S.name, "7")
    assert LEASE_S.read() == 7.0
