"""The `specfleet` console entry point, apart from the command tree it imports.

Importing every subcommand takes about half a second; a Ctrl-C (or SIGTERM, or SIGHUP: the
terminal closed) in that time ends in the same one line and exit status as one during a
command, not a traceback. Once
the command has finished (or said `interrupted`), further signals are ignored while the
process exits. Standard output that is closed, or that fails a write (a full disk,
`> /dev/full`), is one line and exit status 1, not a traceback or a reply silently lost.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys

from specfleet.errors import INTERRUPTED_EXIT


def _terminate(_signum, _frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a command exactly as Ctrl-C does


def stopping_signals() -> tuple[int, ...]:
    """The signals that stop a command as Ctrl-C does: SIGTERM, and SIGHUP (its terminal
    closed: the driver died at once and left its runs `running` for a lease) unless the
    command was started to outlive its terminal (`nohup` leaves SIGHUP ignored)."""
    hangup = getattr(signal, "SIGHUP", None)  # POSIX only
    keep = hangup is not None and signal.getsignal(hangup) is not signal.SIG_IGN
    return (signal.SIGTERM, hangup) if keep and hangup is not None else (signal.SIGTERM,)


def main() -> None:
    """Console entry point."""
    try:
        for stopping in stopping_signals():
            signal.signal(stopping, _terminate)
        if sys.stdout is None:  # started with `>&-`: every line would vanish, exit status 0
            _fail("standard output is closed; expected it open (`> /dev/null` discards it)")
        from specfleet.cli.main import app
    except KeyboardInterrupt:
        _fail("interrupted", INTERRUPTED_EXIT)
    try:
        app()
    except KeyboardInterrupt:  # while the command tree is built, before a command runs
        _fail("interrupted", INTERRUPTED_EXIT)
    except OSError as err:  # click answers a broken pipe itself; any other write error lands here
        if not _stdout_failed(err):
            raise
        _fail(f"cannot write to standard output: {err.strerror or err}")
    finally:
        # The command has said its last line; only Ray's exit hook is left (it stops an
        # embedded fleet, ~0.5 s). A second Ctrl-C there would print its traceback.
        for stopping in (signal.SIGINT, *stopping_signals()):
            signal.signal(stopping, signal.SIG_IGN)


def _stdout_failed(err: OSError) -> bool:
    """Whether `err` came from writing standard output (its traceback ends in a write to it)."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    # `_write_buffer`: rich's Console, which writes the terminal tables
    return bool(frames) and frames[-1].name in {"write", "flush", "echo", "secho", "print",
                                                 "_write_buffer"}


def _fail(line: str, status: int = 1) -> None:
    with contextlib.suppress(OSError):  # a closed terminal takes no line
        sys.stderr.write(f"error: {line}\n" if status != INTERRUPTED_EXIT else f"{line}\n")
    if sys.stdout is not None:  # the exit's own flush of a full stdout would say it again
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise SystemExit(status) from None
