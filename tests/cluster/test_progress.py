"""The per-host progress bars: done / running / failed per host, off for tests."""

from __future__ import annotations

import io

from rich.console import Console

from specfleet.cluster.progress import HostProgress, ProgressEvent, fan_out


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
