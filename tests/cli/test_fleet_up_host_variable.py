"""`fleet up` without --name takes `$SPECFLEET_HOST` under the same rule as --name (and as
`fleet join` took it): `SPECFLEET_HOST=Bad.Name fleet up` started a head named `Bad.Name`,
temp dir `/tmp/ray-specfleet-Bad.Name`, which no `fleet join` would take as a name."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from specfleet.cli.main import app


def test_up_refuses_a_host_variable_no_name_may_hold_before_anything_starts(monkeypatch):
    monkeypatch.setenv("SPECFLEET_HOST", "Bad.Name")
    monkeypatch.setattr("specfleet.cluster.membership.fleet_up",
                        lambda *a, **k: pytest.fail("fleet up ran"))
    result = CliRunner().invoke(app, ["fleet", "up", "--port", "26390"])
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr == ("error: $SPECFLEET_HOST 'Bad.Name': expected 1-63 lower-case "
                             "letters, digits, '-' or '_', starting and ending with a letter or "
                             "digit\n")
