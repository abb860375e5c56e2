"""`fleet status`'s table: a host that does not answer has no busy/idle column, and its line
ended in two spaces (the empty column's separator), which a `grep 'suspect$'` missed."""

from __future__ import annotations

from specfleet.cli.fleet import render_status


def test_a_host_without_a_busy_column_has_no_trailing_spaces():
    rows = [{"host": "h2", "kind": "linux-cpu", "node_alive": False, "health": "suspect",
             "reason": "no answer within 3 s"}]
    assert render_status(rows).splitlines()[0] == "h2  linux-cpu  suspect (no answer within 3 s)"
