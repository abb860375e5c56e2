"""What every `ray.init` of ours runs inside (`ray_connecting`): Ctrl-C and SIGTERM held
while Ray starts, the driver standing in a folder that shadows no package, and what Ray's
driver prints by itself sent to stderr as one plain line; and the clean-up of a `ray.init`
cut short. Used by `fleet.connect` and the membership commands (`fleet up / join`)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator

import ray


@contextlib.contextmanager
def stop_what_a_cut_short_init_started() -> Iterator[None]:
    """A `ray.init` cut short (Ctrl-C while it starts the node) leaves processes Ray's exit
    hook does not stop: the raylet's dashboard and runtime-env agents. Then every process
    this one started (Ray's, as nothing else runs yet) is stopped, and only those."""
    try:
        yield
    except BaseException:
        import psutil

        started = psutil.Process().children(recursive=True)  # the agents, while still ours
        with contextlib.suppress(Exception):
            ray.shutdown()
        for process in started:
            with contextlib.suppress(psutil.Error):
                process.kill()
        raise


@contextlib.contextmanager
def ray_connecting() -> Iterator[None]:
    """What every `ray.init` of ours runs inside: signals held (`signals_held_while_ray_starts`)
    and the driver standing in a folder that shadows no package (`cwd_for_workers`)."""
    ray_prints_to_stderr()
    with signals_held_while_ray_starts(), cwd_for_workers():
        yield


def ray_prints_to_stderr() -> None:
    """Send what Ray's driver prints by itself, from a thread at any moment (`(raylet) The node
    ... has been marked dead ...` while a host is lost), to stderr: Ray writes it to stdout,
    where it broke the JSON of `fleet status --json`. The raylet's messages (a node marked
    dead, a worker died) become one plain line each (`raylet_line`)."""
    from ray._private import worker as ray_worker

    rays_own = getattr(ray_worker, "print_to_stdstream", None)
    if rays_own is None or getattr(rays_own, "__name__", "") == "to_stderr":
        return  # a Ray without it (its test says so), or redirected by an earlier connect

    def to_stderr(data: dict, ignore_prefix: bool) -> None:
        if data.get("pid") != "raylet":
            rays_own({**data, "is_err": True}, ignore_prefix)
            return
        for message in data.get("lines", []):
            sys.stderr.write(f"ray: {raylet_line(message)}\n")
        sys.stderr.flush()

    # Ray's error listener looks the function up in its module at each message.
    ray_worker.print_to_stdstream = to_stderr


# "Worker PID: 23080 Worker exit type: SYSTEM_ERROR Worker exit detail: ... Some common causes"
_WORKER_FIELD = re.compile(r"Worker (PID|exit type|exit detail): (.*?)"
                           r"(?= Worker [\w ]+?:| Some common causes|$)")


def raylet_line(message: str) -> str:
    """One of the raylet's messages as one line: its first sentence, and for a worker that
    died its pid and how it exited; not Ray's coloured paragraph of ids and common causes."""
    text = " ".join(message.split())
    first = re.split(r"(?<=\.) ", text, maxsplit=1)[0]
    worker = dict(_WORKER_FIELD.findall(text))
    if "PID" in worker:
        first = (f"{first.rstrip('.')} (pid {worker['PID']}, "
                 f"{worker.get('exit type', 'exit unknown')}: {worker.get('exit detail', '')})")
    return first[:400]


@contextlib.contextmanager
def cwd_for_workers() -> Iterator[None]:
    """Stand in this user's runtime dir while `ray.init` runs: Ray puts the driver's current
    folder on every worker's sys.path, where a folder named `specfleet` (a clone, seen from
    the folder above it) shadows the installed package and every worker dies starting."""
    from specfleet.dirs import runtime_dir

    try:
        here: str | None = os.getcwd()
    except OSError:  # the folder was removed under us: nothing to go back to
        here = None
    os.chdir(runtime_dir())
    try:
        yield
    finally:
        if here is not None:
            with contextlib.suppress(OSError):
                os.chdir(here)


@contextlib.contextmanager
def signals_held_while_ray_starts() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM (SIGHUP too, where the CLI stops on it) while `ray.init` runs,
    then raise the first as Ctrl-C.

    A `ray.init` cut short between creating its core worker and keeping it leaves a core
    worker no shutdown stops, and the process dies of SIGSEGV as it exits (its metrics
    timer runs on while the C++ exit hook destroys it). A second signal is not held: a
    user who presses Ctrl-C twice (a head that never answers) stops at once. Ray's own
    SIGTERM handler, a bare exit that would skip marking runs in flight interrupted (the
    CLI treats SIGTERM like Ctrl-C), is not installed meanwhile.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach the main thread only; nothing to hold here
        return
    import ray._private.utils as ray_utils

    held: list[int] = []

    def hold(signum: int, _frame) -> None:
        if held:
            raise KeyboardInterrupt  # the second: stop now
        held.append(signum)

    # SIGHUP too where the CLI stops on it (not under `nohup`, nor outside the CLI). A signal
    # ignored stays ignored: `specfleet ... &` in a script ignores Ctrl-C meant for the
    # script, and one during `ray.init` stopped it.
    hangup = getattr(signal, "SIGHUP", None)
    stopping = (signal.SIGINT, signal.SIGTERM, *(
        [hangup] if hangup is not None
        and signal.getsignal(hangup) is not signal.SIG_DFL else []))
    previous = {sig: handler for sig in stopping
                if (handler := signal.getsignal(sig)) is not signal.SIG_IGN}
    rays_own = ray_utils.set_sigterm_handler
    ray_utils.set_sigterm_handler = lambda _handler: None  # ray.init and its node set one
    for sig in previous:
        signal.signal(sig, hold)
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = rays_own
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
    if held:
        raise KeyboardInterrupt
