"""Small file systems for the full-disk tests (root only; each unmounted after): a 1 MiB
tmpfs, and a 4 MiB ext4, whose 1 KiB blocks SQLite's one byte per 4 KiB page of its -shm
does not fill."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def mounted(folder: Path, kind: str) -> Iterator[Path]:
    """Mount a small `kind` ("tmpfs" or "ext4") file system on `folder`; skip where this user
    or machine cannot."""
    if os.geteuid() != 0:
        pytest.skip("mounting a file system needs root")
    folder.mkdir()
    if kind == "tmpfs":
        command = ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)]
    else:
        if shutil.which("mkfs.ext4") is None:
            pytest.skip("no mkfs.ext4 here")
        image = folder.with_name(folder.name + ".img")
        with open(image, "wb") as blank:
            blank.truncate(4 * 1024 * 1024)
        subprocess.run(["mkfs.ext4", "-q", "-F", "-b", "1024", str(image)], check=True,
                       capture_output=True)
        command = ["mount", "-o", "loop", str(image), str(folder)]
    made = subprocess.run(command, capture_output=True, check=False)
    if made.returncode:
        pytest.skip(f"cannot mount a {kind} here: {made.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path, leave_bytes: int = 0) -> None:
    """Fill the disk of `folder` up to `leave_bytes` free (as root counts it), with `filler`."""
    os.sync()  # blocks freed or written a moment ago are counted as they will stay
    info = os.statvfs(folder)
    wanted = info.f_bfree * info.f_frsize - leave_bytes
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as filler:
        while wanted > 0:
            wanted -= filler.write(b"\0" * min(4096, wanted))
            filler.flush()
    os.sync()
