"""The `specfleet` console entry point, apart from the command tree it imports.

Importing every subcommand takes about half a second; a Ctrl-C (or SIGTERM) in that time
ends in the same one line and exit status as one during a command, not a traceback. Once
the command has finished (or said `interrupted`), further signals are ignored while the
process exits.
"""

from __future__ import annotations

import signal
import sys

from specfleet.errors import INTERRUPTED_EXIT


def _terminate(_signum, _frame) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a command exactly as Ctrl-C does


def main() -> None:
    """Console entry point."""
    try:
        signal.signal(signal.SIGTERM, _terminate)
        from specfleet.cli.main import app
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(INTERRUPTED_EXIT) from None
    try:
        app()
    finally:
        # The command has said its last line; only Ray's exit hook is left (it stops an
        # embedded fleet, ~0.5 s). A second Ctrl-C there would print its traceback.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
