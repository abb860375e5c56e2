"""The machine lock: one timed run at a time on this machine, whoever asks.

A worker holds an exclusive `flock` on a file for the whole timed window of a run, and
waits for it first. The file lives outside Ray, so two embedded fleets, two drivers of two
clusters, or a stray `specfleet generate` never overlap their timed runs. It sits in a
private runtime directory (`dirs.runtime_dir`: `/tmp/specfleet-<uid>`, or
`$SPECFLEET_RUNTIME_DIR`): created 0700, refused unless it is a real directory owned by this
user, and the lock file is opened with `O_NOFOLLOW`, so nobody else can plant a link or hold
our lock. One lock per machine id (simulated hosts with stand-in machine ids keep their own).
The holder writes who it is into the file (`matrix demo-3fa9c2, pid 4242`), so a run that
waits can say what it waits for.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from specfleet.dirs import runtime_dir
from specfleet.errors import UserError

POLL_S = 0.05  # how often a waiting run asks again (and looks at its cancel flag)


def machine_lock_path(machine_id: str) -> Path:
    """The lock file of one machine id in the runtime directory."""
    digest = hashlib.sha256(machine_id.encode()).hexdigest()[:16]
    return runtime_dir() / f"machine-{digest}.lock"


class MachineLock:
    """An exclusive flock on `path`, waited for (cancellably) and released on exit.

    Args:
        path: the lock file.
        holder: who takes it, in words (`matrix demo-3fa9c2`); written into the file with
            this process's id while held.

    Attributes:
        waited_s: how long `acquire` waited for another holder.
        waiting_since: while `acquire` waits for another holder, since when (monotonic).
    """

    def __init__(self, path: str | os.PathLike, holder: str = "specfleet") -> None:
        self.path = os.fspath(path)
        self.holder = holder
        self.waited_s = 0.0
        self.waiting_since: float | None = None
        self._fd: int | None = None

    def acquire(self, cancelled: Callable[[], bool] = lambda: False,
                on_wait: Callable[[str], None] | None = None) -> bool:
        """Wait until this process holds the lock; False if `cancelled()` turned true first.
        `on_wait` is told who holds it (`held_by`) once, when the first try finds it held."""
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self._fd = os.open(self.path, flags, 0o600)
        except OSError as err:  # a folder or a link in its place, a full or read-only disk
            raise UserError(f"the machine lock {self.path}: cannot be opened ({err.strerror}); "
                            "expected a file specfleet makes there (remove what is in its "
                            "place)") from None
        start = time.monotonic()
        try:
            while True:
                try:
                    fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    self.waited_s = time.monotonic() - start
                    self._say_holder()
                    return True
                except BlockingIOError:
                    if cancelled():
                        self.release()
                        return False
                    if self.waiting_since is None and on_wait is not None:
                        on_wait(self.held_by())
                    self.waiting_since = start
                    time.sleep(POLL_S)
        finally:
            self.waiting_since = None

    def held_by(self) -> str:
        """Who holds the lock, as its holder wrote it ("" when not known). Any thread may
        ask: it reads through a descriptor of its own."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return ""
        try:
            return " ".join(os.read(fd, 200).decode(errors="replace").split())
        except OSError:
            return ""
        finally:
            os.close(fd)

    def _say_holder(self) -> None:
        assert self._fd is not None
        text = f"{self.holder}, pid {os.getpid()}".encode()
        with contextlib.suppress(OSError):  # a full disk: the lock holds all the same
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, text, 0)

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing releases the lock
            self._fd = None

    def __enter__(self) -> MachineLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def holding_this_machine(holder: str, say: Callable[[str], None]) -> Iterator[None]:
    """This machine's lock around a timing outside a worker (`generate`, `calibrate`): never
    timed beside a fleet's run or another command's. A wait is said when it starts, naming
    who holds it, and when it ends (the timing starts then, not when the command did)."""
    from specfleet.workers.hardware import machine_id

    lock = MachineLock(machine_lock_path(machine_id()), holder)
    waited: list[str] = []

    def waiting(who: str) -> None:
        waited.append(who)
        say(f"{holder}: waiting for the machine lock: held by "
            f"{who or 'another specfleet process'}")

    try:
        lock.acquire(on_wait=waiting)
        if waited:
            say(f"{holder}: got the machine lock after {lock.waited_s:.0f} s")
        yield
    finally:
        lock.release()
