"""`history --target` names a host stored runs hold even where today's host name rule would
refuse it (a store older than the rule, a hand-edited one): `results` lists such targets."""

from __future__ import annotations

from typer.testing import CliRunner

from specfleet.cli.main import app
from tests.serve.test_bad_requests_sweep import seed_old_host

HISTORY = ["history", "--model", "m1", "--prompt", "edit_fn", "--arm", "graded", "--target"]


def test_history_reads_a_stored_host_the_rule_refuses(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.db'}"
    seed_old_host(url)
    stored = CliRunner().invoke(app, [*HISTORY, "old box/toy/cpu", "--db", url])
    assert stored.exit_code == 0, stored.output
    assert "old box/toy/cpu" in stored.stdout
    unstored = CliRunner().invoke(app, [*HISTORY, "new box/toy", "--db", url])
    assert unstored.exit_code == 2
    assert unstored.stderr.startswith("error: --target HOST: expected a host name of letters")
