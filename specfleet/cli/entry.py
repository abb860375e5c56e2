"""The `specfleet` console entry point, apart from the command tree it imports.

Importing every subcommand takes about half a second; a Ctrl-C (or SIGTERM, or SIGHUP: the
terminal closed) in that time ends in the same one line and exit status as one during a
command, not a traceback; one that lands in a finalizer (`__del__` or a weakref callback,
where Python drops the exception it raises) is sent again a moment later rather than lost. Once
the command has finished (or said `interrupted`), further signals are ignored while the
process exits. Standard output that is closed, or that fails a write (a full disk,
`> /dev/full`), is one line and exit status 1, not a traceback or a reply silently lost.
Standard error whose reader goes away mid-command (`2>&1 >out | head -3`) is sent to
/dev/null from then on: the command goes on and stores what it runs (progress is all it
loses), where the broken pipe ended a driver without a word and left its matrix `running`.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading

from specfleet.errors import INTERRUPTED_EXIT

# Stopping signals that landed in a finalizer, where Python drops the exception raised, and
# that no later delivery has raised yet: the command still ends as interrupted.
_DROPPED: list[int] = []
RESEND_S = 0.05  # a signal that landed in a finalizer is sent again after this


_RAISED: list[int] = []  # the last stopping signal raised as KeyboardInterrupt


def _terminate(signum, frame) -> None:
    """SIGTERM (and SIGHUP, and Ctrl-C) stop a command exactly as Ctrl-C does (raised in a
    `__del__` or a weakref callback, where Python drops it, `_dropped_stop` sends it again)."""
    _DROPPED.clear()  # raised now: what the command does with it is its own (serve exits 0)
    _RAISED[:] = [signum]
    raise KeyboardInterrupt


def _send_again(signum: int) -> None:
    """Send `signum` again in a moment: its KeyboardInterrupt could not stop the command."""
    _DROPPED.append(signum)
    timer = threading.Timer(RESEND_S, os.kill, (os.getpid(), signum))
    timer.daemon = True
    timer.start()


def _dropped_stop(unraisable) -> None:
    """`sys.unraisablehook`: a KeyboardInterrupt of ours that Python dropped (raised in a
    `__del__` or a weakref callback: importlib's module-lock `cb` while the commands import)
    is sent again, not printed as "Exception ignored" with the command running on to exit 0."""
    if unraisable.exc_type is KeyboardInterrupt and _RAISED:
        _send_again(_RAISED[0])
        return
    sys.__unraisablehook__(unraisable)


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
        sys.unraisablehook = _dropped_stop
        for stopping in (signal.SIGINT, *stopping_signals()):
            if signal.getsignal(stopping) is not signal.SIG_IGN:  # `cmd &` in a script
                signal.signal(stopping, _terminate)
        if sys.stdout is None:  # started with `>&-`: every line would vanish, exit status 0
            _fail("standard output is closed; expected it open (`> /dev/null` discards it)")
        _escape_what_cannot_be_encoded()
        _stderr_outlives_its_reader()
        from specfleet.cli.main import app
    except KeyboardInterrupt:
        _fail("interrupted", INTERRUPTED_EXIT)
    try:
        app()
    except KeyboardInterrupt:  # while the command tree is built, before a command runs
        _fail("interrupted", INTERRUPTED_EXIT)
    except SystemExit as done:  # every command ends so (click's standalone mode)
        if _DROPPED and done.code in (0, None):  # a stop that only finalizers heard
            _fail("interrupted", INTERRUPTED_EXIT)
        raise
    except OSError as err:  # click answers a broken pipe itself; any other write error lands here
        if not _stdout_failed(err):
            raise
        _fail(f"cannot write to standard output: {err.strerror or err}")
    finally:
        # The command has said its last line; only Ray's exit hook is left (it stops an
        # embedded fleet, ~0.5 s). A second Ctrl-C there would print its traceback.
        for stopping in (signal.SIGINT, *stopping_signals()):
            signal.signal(stopping, signal.SIG_IGN)


def _escape_what_cannot_be_encoded() -> None:
    """A reply's emoji on a stream that cannot encode it (`PYTHONIOENCODING=latin-1`) is
    written as `\\U0001f600`, not a UnicodeEncodeError traceback half-way through the output."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if reconfigure is not None and encoding != "utf8":
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")


class _Stderr(io.TextIOWrapper):
    """Standard error, which a broken pipe turns into /dev/null. The file's own write stays
    C code (a Python-level raw write let a Ctrl-C land after the bytes went out and before
    the buffer knew: the line was written twice)."""

    def write(self, text: str) -> int:
        try:
            return super().write(text)
        except BrokenPipeError:  # its reader is gone: nobody reads progress any more
            _to_devnull(self.fileno())
            return len(text)

    def flush(self) -> None:
        try:
            super().flush()
        except BrokenPipeError:
            _to_devnull(self.fileno())
            super().flush()  # what the pipe refused goes to /dev/null


def _to_devnull(fd: int) -> None:
    """Point `fd` at /dev/null: every later write to it vanishes, Ray's and C code's too."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)


def _stderr_outlives_its_reader() -> None:
    """Put `sys.stderr` on `_Stderr`, with its encoding, errors and line buffering."""
    stream = sys.stderr
    if stream is None or not hasattr(stream, "fileno"):
        return
    try:
        raw = io.FileIO(stream.fileno(), "w", closefd=False)
    except (OSError, ValueError):  # no file descriptor behind it (an embedding host's)
        return
    stream.flush()
    sys.stderr = _Stderr(io.BufferedWriter(raw), encoding=stream.encoding,
                         errors=stream.errors, line_buffering=True)


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
