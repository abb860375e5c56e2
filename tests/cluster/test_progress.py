"""Progress while a matrix runs: bars per host on a terminal, plain lines without one."""

from __future__ import annotations

import io

from rich.console import Console

from specfleet.cluster.progress import HostProgress, ProgressEvent, RunLines, fan_out, progress_for


def test_bars_show_done_running_failed_per_host():
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    with HostProgress({"alpha": 3, "beta": 1}, console=console) as bars:
        bars.update(ProgressEvent("alpha", "k1", "running", 0, 0, 3, "healthy"))
        bars.update(ProgressEvent("alpha", "k1", "done", 1, 0, 3, "healthy"))
        bars.update(ProgressEvent("beta", "k2", "interrupted", 0, 1, 1, "suspect"))
    text = out.getvalue()
    assert "alpha" in text and "1/3" in text and "done 1  running 0  failed 0" in text
    assert "beta" in text and "1/1" in text and "failed 1  (suspect)" in text


def test_disabled_bars_print_nothing_and_callbacks_fan_out():
    out = io.StringIO()
    seen = []
    with HostProgress({"alpha": 1}, enabled=False, console=Console(file=out)) as bars:
        notify = fan_out([bars.update, None, seen.append])
        notify(ProgressEvent("alpha", "k", "done", 1, 0, 1, "healthy"))
    assert out.getvalue() == "" and [e.run_key for e in seen] == ["k"]


def test_without_a_terminal_each_finished_run_is_one_plain_line():
    out = io.StringIO()
    lines = RunLines(3, out)
    lines.update(ProgressEvent("a", "k1", "running", 0, 0, 3, "healthy", run="torch p plain rep 1"))
    lines.update(ProgressEvent("a", "k1", "done", 1, 0, 3, "healthy", run="torch p plain rep 1",
                               tok_per_s=19.84))
    lines.update(ProgressEvent("a", "k2", "failed", 1, 1, 3, "healthy", "OOM",
                               run="torch p graded rep 1"))
    lines.update(ProgressEvent("a", "k3", "waiting", 1, 1, 3, "healthy", "busy"))
    assert out.getvalue() == ("[1/3] torch p plain rep 1: 19.8 tok/s\n"
                              "[2/3] torch p graded rep 1: failed: OOM\n")


def test_bars_on_a_terminal_lines_without_one(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal
    bars, lines = progress_for({"a": 2, "b": 3}, enabled=True)
    assert isinstance(lines, RunLines) and lines._total == 5
    assert progress_for({"a": 2}, enabled=False)[1] is None


def test_giving_up_the_wait_is_said_once_on_bars_lines_and_the_cli(capsys):
    from specfleet.cli.matrix import say_waiting

    reason = "gave up waiting after 120 s (host throttled: on battery); running anyway, flagged"
    event = ProgressEvent("alpha", "k", "gave up", 0, 0, 2, "healthy", reason)
    out = io.StringIO()
    with HostProgress({"alpha": 2}, console=Console(file=out, width=200)) as bars:
        bars.update(event)
    assert reason in out.getvalue()
    lines = io.StringIO()
    RunLines(2, lines).update(event)
    assert lines.getvalue() == f"alpha: {reason}\n"
    say_waiting(event)
    assert capsys.readouterr().err == f"alpha: {reason}\n"
