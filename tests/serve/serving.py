"""`specfleet serve` as a real process, as a user starts it: on a free loopback port, its
stderr in a file, waited for until it listens (every wait bounded), stopped at the end."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CLI = Path(sys.executable).with_name("specfleet")


def free_port() -> int:
    """A TCP port free on the loopback address now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(proc: subprocess.Popen, host: str, port: int, log: Path,
                   within_s: float = 90.0) -> None:
    """Return once `host:port` takes a connection (it sends nothing); fail the test, with
    the server's last words, if the process exits or `within_s` passes first."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"specfleet serve exited: {log.read_text()[-2000:]}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    pytest.fail(f"specfleet serve did not listen within {within_s:g} s: {log.read_text()}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, as a user's Ctrl-C or service manager stops it; SIGKILL after 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def serving(args: list[str], log: Path, started: list | None = None) -> Iterator[str]:
    """`specfleet serve ARGS` on a free loopback port, its stderr in `log`; yields the base
    URL once it listens (the process appended to `started`)."""
    port = free_port()
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [str(CLI), "serve", "--port", str(port), *args], stdout=subprocess.DEVNULL,
            stderr=err, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    if started is not None:
        started.append(proc)
    try:
        wait_listening(proc, "127.0.0.1", port, log)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
