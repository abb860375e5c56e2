"""What the test setup installs with apt serialised: xdist workers may both find a package
missing, and dpkg takes one apt-get at a time."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator


@contextlib.contextmanager
def machine_install_lock() -> Iterator[None]:
    """Hold this machine's test install lock (re-check what is missing inside it)."""
    with open(os.path.join(tempfile.gettempdir(), "specfleet-test-apt.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
