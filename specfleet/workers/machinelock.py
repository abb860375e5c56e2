"""The machine lock: one timed run at a time on this machine, whoever asks.

A worker holds an exclusive `flock` on a file for the whole timed window of a run, and
waits for it first. The file lives outside Ray, so two embedded fleets, two drivers of two
clusters, or a stray `specfleet generate` never overlap their timed runs. It sits in a
private runtime directory (`dirs.runtime_dir`: `/tmp/specfleet-<uid>`, or
`$SPECFLEET_RUNTIME_DIR`): created 0700, refused unless it is a real directory owned by this
user, and the lock file is opened with `O_NOFOLLOW`, so nobody else can plant a link or hold
our lock. One lock per machine id (simulated hosts with stand-in machine ids keep their own).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from specfleet.dirs import runtime_dir

POLL_S = 0.05  # how often a waiting run asks again (and looks at its cancel flag)


def machine_lock_path(machine_id: str) -> Path:
    """The lock file of one machine id in the runtime directory."""
    digest = hashlib.sha256(machine_id.encode()).hexdigest()[:16]
    return runtime_dir() / f"machine-{digest}.lock"


class MachineLock:
    """An exclusive flock on `path`, waited for (cancellably) and released on exit.

    Attributes:
        waited_s: how long `acquire` waited for another holder.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self.waited_s = 0.0
        self._fd: int | None = None

    def acquire(self, cancelled: Callable[[], bool] = lambda: False) -> bool:
        """Wait until this process holds the lock; False if `cancelled()` turned true first."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fd = os.open(self.path, flags, 0o600)
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                self.waited_s = time.monotonic() - start
                return True
            except BlockingIOError:
                if cancelled():
                    self.release()
                    return False
                time.sleep(POLL_S)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None

    def __enter__(self) -> MachineLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
