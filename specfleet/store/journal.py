"""The result journal: a finished result is on the driver's disk before the store sees it.

The scheduler writes each result it fetches to one file (written to a temp name, fsynced,
then renamed), writes it to the store, and deletes the file once the store has it. When the
store stays unreachable longer than the driver's retry bound, the files stay; the next
writing command on that store (`matrix resume`, `matrix run`, ...) writes them back. Writing
back is idempotent: the store keeps one row per run key and takes an identical result twice
as one.

One directory per store (a hash of its URL, password left out) under
`$SPECFLEET_JOURNAL_DIR` or the user data dir; directories 0700, files 0600.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL

from specfleet.dirs import user_data_dir
from specfleet.errors import UserError
from specfleet.jobs.resolve import counted
from specfleet.jobs.run import RunResult
from specfleet.settings import JOURNAL_DIR
from specfleet.userfiles import check_last_folder_only, check_writable_dir, sync_folder

SUFFIX = ".json"
CONFLICT_SUFFIX = ".conflict"  # the store holds a different result: kept for a person to see
STOPPED_SUFFIX = ".stopped"  # a driver that gave up on an outage: its leases can end at once


class JournalError(UserError):
    """A finished result could not be put in the journal (a full disk, a folder gone)."""


def journal_root() -> Path:
    """`$SPECFLEET_JOURNAL_DIR`, else `journal/` in the user data dir."""
    named = JOURNAL_DIR.read()
    return named or user_data_dir() / "journal"


def check_journal_root() -> None:
    """Refuse a journal folder that cannot be made or written (`$SPECFLEET_JOURNAL_DIR` a
    file, or under /proc) before a writing command starts: a result finished later could
    not be kept for its store.

    Raises:
        UserError: naming the variable (or the default folder) and what is expected.
    """
    named = JOURNAL_DIR.read()
    if named is not None:  # made on first use, but not a whole tree under a typo
        check_last_folder_only(named, JOURNAL_DIR.name, "a folder for the journal")
    check_writable_dir(journal_root(), JOURNAL_DIR.name if named else
                      f"the journal folder ({JOURNAL_DIR.name} moves it)")


def store_key(url: URL) -> str:
    """A name for one store's journal: sha256 of its URL without the password."""
    return hashlib.sha256(url.render_as_string(hide_password=True).encode()).hexdigest()[:16]


def _private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.is_symlink() or not path.is_dir():
        raise OSError(f"{path} is not a private directory")
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)
    return path


@dataclass(frozen=True)
class WriteBack:
    """What writing the journal back did: results written, already there, refused (kept as `.conflict`)."""

    written: int = 0
    already: int = 0
    conflicts: int = 0
    stopped: int = 0  # drivers that gave up on an outage, whose leases were ended

    @property
    def total(self) -> int:
        return self.written + self.already + self.conflicts

    def line(self) -> str:
        """What a command says when it wrote the journal back; "" when there was nothing."""
        said = []
        if self.total:
            said.append(f"{counted(self.written, 'finished result')} written to the store "
                        f"({self.already} already there, {self.conflicts} refused)")
        if self.stopped:
            said.append(f"ended the leases of {counted(self.stopped, 'driver')} that stopped "
                        "on a store outage (a resume need not wait them out)")
        return f"journal: {'; '.join(said)}" if said else ""


class Journal:
    """The journal of one store.

    Args:
        url: the store's URL (names the directory).
        root: the journal root (default `journal_root()`).
    """

    def __init__(self, url: URL, root: Path | None = None) -> None:
        self.dir = (root or journal_root()) / store_key(url)

    def entry(self, run_key: str, suffix: str = SUFFIX) -> Path:
        """The file of a run key's result (or, with `STOPPED_SUFFIX`, of a driver's note)."""
        return self.dir / (hashlib.sha256(run_key.encode()).hexdigest()[:32] + suffix)

    def write(self, result: RunResult) -> Path:
        """Put `result` on disk for good (fsynced) before it goes to the store.

        Raises:
            JournalError: it could not be written (a full disk); no partial entry is left.
        """
        final = self.entry(result.run_key)
        tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
        try:
            _private_dir(self.dir)
            self._write_file(tmp, final, json.dumps(result.model_dump(mode="json")).encode())
        except OSError as err:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise JournalError(
                f"cannot keep the result of run {result.run_key} in the journal {self.dir} "
                f"({err.strerror or err}); expected a folder this user can write, with free "
                f"space ({JOURNAL_DIR.name} names another)") from None
        return final

    def _write_file(self, tmp: Path, final: Path, data: bytes) -> None:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, final)
        sync_folder(self.dir)  # the rename itself survives a crash

    def note_stopped(self, driver_id: str) -> None:
        """This driver stops on a store outage: the next write-back ends its leases, which
        nobody renews now, rather than have `resume` wait them out. Best effort: without
        the note they run out by themselves."""
        final = self.entry(driver_id, STOPPED_SUFFIX)
        with contextlib.suppress(OSError):
            _private_dir(self.dir)
            self._write_file(final.with_name(f".{final.name}.tmp"), final, driver_id.encode())

    def done(self, run_key: str) -> None:
        """The store has the result: drop its entry."""
        self.entry(run_key).unlink(missing_ok=True)

    def pending(self) -> list[Path]:
        """Entries not yet in the store, oldest first."""
        if not self.dir.is_dir():
            return []
        dated = []
        for path in self.dir.iterdir():
            if path.suffix != SUFFIX:
                continue
            with contextlib.suppress(FileNotFoundError):  # stored and dropped meanwhile
                info = path.stat()
                if stat.S_ISREG(info.st_mode):
                    dated.append((info.st_mtime, path))
        return [path for _, path in sorted(dated)]

    def write_back(self, store) -> WriteBack:
        """Write every pending entry to `store` (idempotent); ones it refuses (a different
        result stored, an unknown run, a value its columns cannot hold) are renamed
        `.conflict` and kept. Store faults propagate: the entries stay for next time."""
        from sqlalchemy.exc import DataError, DBAPIError, StatementError

        from specfleet.store.errors import StoreConflict, UnknownRun

        written = already = conflicts = 0
        # Another driver on this store may store an entry and drop it while we look at it.
        for path in self.pending():
            try:
                result = RunResult.model_validate_json(path.read_bytes())
            except FileNotFoundError:
                continue
            except (OSError, ValueError):
                conflicts += _set_aside(path)
                continue
            try:
                fresh = store.record_result(result)
            except (StoreConflict, UnknownRun, DataError):
                conflicts += _set_aside(path)
                continue
            except StatementError as err:
                if isinstance(err, DBAPIError):  # the database's own: a fault, kept for later
                    raise
                conflicts += _set_aside(path)  # a value no column takes, refused unsent
                continue
            path.unlink(missing_ok=True)
            written += bool(fresh)
            already += not fresh
        return WriteBack(written, already, conflicts, self._end_stopped_leases(store))

    def _end_stopped_leases(self, store) -> int:
        """End the leases of the drivers noted stopped, once their results are back."""
        stopped = 0
        for path in sorted(self.dir.glob("*" + STOPPED_SUFFIX)) if self.dir.is_dir() else []:
            try:
                driver_id = path.read_text()
            except OSError:  # another command took it meanwhile
                continue
            except UnicodeDecodeError:  # no note of ours (a damaged file): kept, not read
                _set_aside(path)
                continue
            store.end_leases(driver_id)
            path.unlink(missing_ok=True)
            stopped += 1
        return stopped


def _set_aside(path: Path) -> bool:
    """Keep an entry the store refuses as `.conflict`; False if it is gone already."""
    try:
        path.rename(path.with_suffix(CONFLICT_SUFFIX))
    except FileNotFoundError:
        return False
    return True
