"""What a command says when its embedded fleet does not come up: Ray's own words, the
machine's load, and the logs of this command's own Ray session."""

from __future__ import annotations

import os
from pathlib import Path

from specfleet.errors import UserError
from specfleet.settings import logical_cpus

# How Ray says its processes did not start: the node did not register in 30 s (a machine
# too busy), its GCS did not come up (a port or socket problem as often as load), or the
# file a process writes its port in never came (its folder's file system full, say).
RAY_START_FAILURES = ("The current node timed out during startup", "Failed to start GCS",
                      "Timed out waiting for file")
# Free space the embedded Ray's session folder needs (its logs and socket files take a few
# MB; with less, Ray waited 31 s for a port file that could not be written).
RAY_DIR_MIN_FREE_MB = 64


def check_ray_dir_room(ray_dir: str) -> None:
    """Refuse, before Ray starts, a session folder on a file system with too little room."""
    import shutil

    folder = Path(ray_dir)
    while not folder.exists() and folder != folder.parent:  # Ray makes it: ask its parent
        folder = folder.parent
    free_mb = shutil.disk_usage(folder).free / 2**20
    if free_mb < RAY_DIR_MIN_FREE_MB:
        raise UserError(f"the embedded fleet's Ray folder {ray_dir}: {free_mb:.1f} MB free; "
                        f"expected at least {RAY_DIR_MIN_FREE_MB} MB there for its session "
                        "files (free some, or set SPECFLEET_RUNTIME_DIR on another file system)")


def embedded_start_failed(err: BaseException, ray_dir: str) -> UserError:
    """Ray's own words when its processes did not start, cut to their first line, with the
    machine's load and where Ray's logs are."""
    said = " ".join(str(err).strip().splitlines()[0].split())
    return UserError(f"the embedded fleet did not start: Ray said {said[:200]!r} "
                     f"({load_text()}its logs: {session_logs(ray_dir)}); expected Ray's "
                     "processes to start: try again once the machine is less busy, or read "
                     "the logs")


def load_text() -> str:
    """`load 7.9 on 2 of 16 CPUs; `: the machine's load beside the CPUs this command may run
    on (its embedded Ray's `num_cpus`), and the machine's count when affinity leaves some out."""
    if not hasattr(os, "getloadavg"):
        return ""
    cpus, machine = logical_cpus(), os.cpu_count() or 1
    of = f"{cpus} of " if cpus < machine else ""
    return f"load {os.getloadavg()[0]:.1f} on {of}{machine} CPUs; "


def session_logs(ray_dir: str) -> str:
    """The logs of the Ray session this process started under `ray_dir`. Not
    `session_latest`: embedded fleets of several commands share the dir, and that link names
    whichever started last. Ray names a session after its driver's pid
    (`session_<date>_<time>_<us>_<pid>`); the dir itself when none is there yet."""
    own = sorted(Path(ray_dir).glob(f"session_*_{os.getpid()}"))
    return f"{own[-1]}/logs" if own else ray_dir
