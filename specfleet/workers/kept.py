"""The newest finished results of a host, kept on its disk for a driver that lost the reply.

A cut link can cost the driver a run's reply while the host finishes the run: Ray resets the
connection when the link returns, or declares the node dead and its worker restarts. The
driver then asks the host's worker for the result (`HostWorker.result`) instead of running the
benchmark again. The results live in the private runtime directory (`dirs.runtime_dir`,
0700, files 0600, opened without following links), so a restarted worker process still has
them; only the newest `KEPT_RESULTS` of each host are kept.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
from pathlib import Path

from specfleet.dirs import runtime_dir
from specfleet.jobs.run import RunResult

KEPT_RESULTS = 8  # a driver only ever asks for the run it had in flight there


class KeptResults:
    """One host's kept results (thread-safe; writes are best effort, never fail a run).

    Args:
        host: the host's fleet name.
        folder: where to keep them (default: `results-<host>` in the runtime directory).
    """

    def __init__(self, host: str, folder: Path | None = None) -> None:
        self._folder = folder
        self._host = host
        self._lock = threading.Lock()

    def put(self, result: RunResult) -> None:
        """Keep `result` (replacing the oldest beyond `KEPT_RESULTS`)."""
        with self._lock, contextlib.suppress(OSError):  # a result not kept: a re-run at worst
            folder = self._dir()
            path = folder / _file_name(result.run_key)
            partial = path.with_suffix(".part")
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(result.model_dump_json())
            os.replace(partial, path)
            for old in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime_ns,
                              reverse=True)[KEPT_RESULTS:]:
                old.unlink(missing_ok=True)

    def get(self, run_key: str) -> RunResult | None:
        """The kept result of `run_key`, or None."""
        with self._lock:
            try:
                fd = os.open(self._dir() / _file_name(run_key), os.O_RDONLY | os.O_NOFOLLOW)
            except OSError:
                return None
            with os.fdopen(fd) as kept:
                return RunResult.model_validate_json(kept.read())

    def _dir(self) -> Path:
        if self._folder is None:
            digest = hashlib.sha256(self._host.encode()).hexdigest()[:12]
            self._folder = runtime_dir() / f"results-{digest}"
        self._folder.mkdir(mode=0o700, exist_ok=True)
        return self._folder


def _file_name(run_key: str) -> str:
    return hashlib.sha256(run_key.encode()).hexdigest()[:32] + ".json"
