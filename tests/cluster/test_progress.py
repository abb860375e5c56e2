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


def test_without_a_terminal_each_finished_run_and_each_wait_is_one_plain_line():
    out = io.StringIO()
    lines = RunLines(3, out)
    lines.update(ProgressEvent("a", "k1", "running", 0, 0, 3, "healthy", run="torch p plain rep 1"))
    lines.update(ProgressEvent("a", "k1", "done", 1, 0, 3, "healthy", run="torch p plain rep 1",
                               tok_per_s=19.84))
    lines.update(ProgressEvent("a", "k2", "failed", 1, 1, 3, "healthy", "OOM",
                               run="torch p graded rep 1"))
    # A wait is said too (a CI log sat silent while a run waited for a quiet host or the
    # machine lock), once until its cause changes or 10 s pass, as without progress bars.
    for _ in range(3):
        lines.update(ProgressEvent("a", "k3", "waiting", 1, 1, 3, "healthy", "busy"))
    lines.update(ProgressEvent("a", "k3", "queued", 1, 1, 3, "healthy", "held by matrix m-1"))
    assert out.getvalue() == ("[1/3] torch p plain rep 1: 19.8 tok/s\n"
                              "[2/3] torch p graded rep 1: failed: OOM\n"
                              "a: waiting for a quiet host: busy\n"
                              "a: waiting for the machine lock: held by matrix m-1\n")


def test_bars_on_a_terminal_lines_without_one(monkeypatch):
    monkeypatch.setattr("sys.stderr", io.StringIO())  # not a terminal
    bars, lines = progress_for({"a": 2, "b": 3}, enabled=True)
    assert isinstance(lines, RunLines) and lines._total == 5
    assert progress_for({"a": 2}, enabled=False)[1] is None


def test_giving_up_the_wait_is_said_once_on_bars_lines_and_the_cli(capsys):
    from specfleet.cluster.progress import WaitingLines

    say_waiting = WaitingLines()
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


def test_a_host_gone_silent_its_return_and_a_late_result_read_as_one_story(capsys):
    from specfleet.cluster.progress import WaitingLines

    say_waiting = WaitingLines()
    run = "h2/toy p plain rep 2"
    story = [
        ProgressEvent("h2", "k5", "interrupted", 4, 1, 10, "unreachable",
                      "host unreachable for 8 s", run),
        ProgressEvent("h2", "", "unreachable", 4, 1, 10, "unreachable",
                      "unreachable: no answer to pings for 8 s; its run is interrupted; "
                      "waiting up to 120 s for it (--wait)"),
        ProgressEvent("h2", "k5", "done", 5, 0, 10, "unreachable",
                      "its result came back 31 s after the run was cut loose; stored", run,
                      12.34, late=True),
        ProgressEvent("h2", "", "back", 5, 0, 10, "healthy",
                      "back: answers again after 47 s unreachable; its next run in 47 s (Ray may "
                      "still declare its node dead)"),
    ]
    lines = io.StringIO()
    run_lines = RunLines(10, lines)
    for event in story:
        run_lines.update(event)
        say_waiting(event)
    assert lines.getvalue().splitlines() == [
        "[1/10] h2/toy p plain rep 2: interrupted: host unreachable for 8 s",
        "h2: unreachable: no answer to pings for 8 s; its run is interrupted; waiting up to "
        "120 s for it (--wait)",
        "[late] h2/toy p plain rep 2: 12.3 tok/s (its result came back 31 s after the run was "
        "cut loose; stored)",
        "h2: back: answers again after 47 s unreachable; its next run in 47 s (Ray may still "
        "declare its node dead)",
    ]
    assert capsys.readouterr().err.splitlines() == [lines.getvalue().splitlines()[i]
                                                     for i in (1, 3)]
    out = io.StringIO()
    with HostProgress({"h2": 10}, console=Console(file=out, width=200)) as bars:
        bars.update(story[1])
    assert "(unreachable)  unreachable: no answer to pings for 8 s" in out.getvalue()


def test_the_wait_default_is_the_schedulers():
    from specfleet.cli.options import WAIT_DEFAULT, parse_wait
    from specfleet.cluster.scheduler import SchedulerOptions

    assert parse_wait(WAIT_DEFAULT) == SchedulerOptions().host_wait_s


def bar_text(event: ProgressEvent, width: int = 200) -> str:
    """What a terminal `width` columns wide shows after `event` (its host's bar, two runs
    planned)."""
    out = io.StringIO()
    with HostProgress({event.host: 2}, console=Console(file=out, width=width)) as bars:
        bars.update(event)
    return out.getvalue()


def test_a_long_wait_reason_is_shown_whole_on_an_80_column_terminal():
    """At 80 columns the bar cut the reason to `leased to matri…`: whose turn it was, lost."""
    reason = "leased to matrix bench-83978e, pid 7189 on vm (another driver); waited 12 s"
    shown = bar_text(ProgressEvent("ws-3", "k1", "leased", 0, 0, 0, "healthy", reason), 80)
    assert all(len(line) <= 80 for line in shown.splitlines())
    assert "…" not in shown and " ".join(shown.split()).count(reason) == 1, shown


def test_a_run_queued_behind_the_machine_lock_is_said_on_bars_and_without_them(capsys):
    # `specfleet bench --no-progress` beside another bench on this machine said nothing while
    # its run waited for the machine lock (the worker's pings say so, and who holds it).
    from collections import deque

    from specfleet.cluster import scheduler
    from specfleet.cluster.hoststate import HostState, InFlight
    from specfleet.cluster.progress import WaitingLines
    from specfleet.jobs.run import RunSpec, Target

    spec = RunSpec(run_key="k1", matrix_id="mine-1", target=Target(host="local", engine="toy",
                   device="cpu"), model="script", prompt_name="p", prompt_text="a b",
                   arm="plain", max_tokens=4)
    host = HostState("local", None, "local", deque(), total=2,
                     inflight=InFlight(spec, None, 0.0))
    events: list[ProgressEvent] = []
    ctx = scheduler._Ctx(store=None, hosts={"local": host}, opts=scheduler.SchedulerOptions(),
                         notify=events.append, leases=None, writer=None)
    now = [0.0]
    say = WaitingLines(clock=lambda: now[0])
    holder = "matrix bench-3fa9c2, pid 4242"
    for second in range(0, 25):  # a ping answer a second while the lock is held
        now[0] = float(second)
        host.answer = {"run_key": "k1", "machine_wait": {"waited_s": second, "held_by": holder}}
        scheduler._say_machine_wait(ctx, host)
        say(events[-1])
    host.answer = {"run_key": "k1"}  # it has the machine
    scheduler._say_machine_wait(ctx, host)
    assert [e.status for e in events] == ["queued"] * 25 + ["running"]
    assert capsys.readouterr().err.splitlines() == [
        f"local: waiting for the machine lock: held by {holder}; waited {s} s" for s in (0, 10, 20)]
    assert f"waiting for the machine lock: held by {holder}; waited 3 s" in bar_text(events[3])


def test_a_run_waiting_for_another_drivers_lease_is_said_on_bars_and_without_them(
        capsys, monkeypatch):
    # Two `matrix run --address` on one fleet: the one refused the machine's lease said
    # nothing, its bar sat still and `--no-progress` printed no line.
    from collections import deque
    from types import SimpleNamespace

    from specfleet.cluster import scheduler
    from specfleet.cluster.hoststate import HostState
    from specfleet.cluster.progress import WaitingLines
    from specfleet.jobs.run import RunSpec, Target

    holder = "leased to matrix bench-77aa01, pid 4242 on ws-3 (another driver)"

    class Leases:  # refuses the machine for 25 s, then grants it
        refused = {"box": holder}

        def acquire(self, machine: str) -> bool:
            return now[0] >= 25.0

    specs = [RunSpec(run_key=f"k{i}", matrix_id="mine-1", target=Target(
        host="h1", engine="toy", device="cpu"), model="script", prompt_name="p",
        prompt_text="a b", arm="plain", max_tokens=4) for i in (1, 2)]
    worker = SimpleNamespace(run=SimpleNamespace(remote=lambda spec: f"ref {spec.run_key}"))
    host = HostState("h1", worker, "box", deque(specs), total=2)
    events: list[ProgressEvent] = []
    ctx = scheduler._Ctx(store=None, hosts={"h1": host}, opts=scheduler.SchedulerOptions(),
                         notify=events.append, leases=Leases(),
                         writer=SimpleNamespace(mark_running=lambda run_key: None))
    now = [0.0]
    monkeypatch.setattr(scheduler, "time", SimpleNamespace(monotonic=lambda: now[0]))
    say = WaitingLines(clock=lambda: now[0])
    for tick in range(0, 27 * 4):  # the scheduler's loop: a pass every 0.25 s
        now[0] = tick / 4
        seen = len(events)
        scheduler._maybe_dispatch(ctx, host)
        for event in events[seen:]:
            say(event)
    assert [e.status for e in events] == ["leased"] * 25 + ["running"]  # once a second
    assert host.inflight is not None and host.inflight.spec.run_key == "k1"
    assert capsys.readouterr().err.splitlines() == [
        f"h1: waiting for the machine: {holder}; waited {s} s" for s in (0, 10, 20)]
    assert f"waiting for the machine: {holder}; waited 3 s" in bar_text(events[3])
    # Its next run, refused again, waits afresh: said at once, counted from 0.
    host.inflight = None
    ctx.busy_machines.clear()
    now[0] = 40.0
    Leases.acquire = lambda self, machine: False  # type: ignore[method-assign]
    scheduler._maybe_dispatch(ctx, host)
    say(events[-1])
    assert capsys.readouterr().err == f"h1: waiting for the machine: {holder}; waited 0 s\n"
