"""`specfleet db backup`: a consistent copy of a SQLite store, taken while others write to it.

SQLite's `VACUUM INTO` copies the store as one read transaction sees it (a writer at work
is neither waited for nor half copied), into a file beside the target that becomes the
target only once it is whole, private (0600) and checked (`PRAGMA quick_check`). A backup
never replaces a file. PostgreSQL has its own tool for this (`pg_dump`), named in the refusal.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL

from specfleet.errors import UserError, one_line
from specfleet.settings import expand_user
from specfleet.store.engine import (
    BUSY_TIMEOUT_S,
    SECRET_QUERY_KEYS,
    display_url,
    read_only_url,
)
from specfleet.userfiles import check_last_folder_only, given_path, sync_folder

PARTIAL_PREFIX = ".specfleet-backup-"  # the copy in the making, beside the target


@dataclass(frozen=True)
class BackupDone:
    """A finished backup.

    Attributes:
        path: the backup file.
        revision: the store's schema revision (None: an empty store).
        matrices: matrices it holds; runs: runs it holds.
        size_bytes: the file's size.
    """

    path: Path
    revision: str | None
    matrices: int
    runs: int
    size_bytes: int


def backup_target(text: str) -> Path:
    """The backup's file as given (`~` expanded): new, in an existing folder.

    Raises:
        UserError: blank, a file or anything else already there, or its folder missing.
    """
    typed = str(expand_user(text, "FILE")) if text.startswith("~") else text  # a blank stays one
    path = given_path(typed, "FILE", "a new file path")
    if os.path.lexists(path):  # a file, a folder, a link: a backup never replaces anything
        raise UserError(f"FILE {path}: already exists; expected a new file name (a backup "
                        "never replaces a file)")
    check_last_folder_only(path, "FILE", "the backup file")
    return path


def back_up(url: URL, source: str, target: Path, revision: str | None) -> BackupDone:
    """Copy the SQLite store at `url` to the new file `target` (see the module docstring).

    Args:
        url: a readable SQLite store (`check_readable`; for PostgreSQL `postgres_refusal`).
        source: what named the store, for messages.
        target: from `backup_target`.
        revision: the store's schema revision, as checked by the caller.

    Raises:
        UserError: the copy or its check failed (a full disk, a folder we cannot write);
            nothing is left at `target`.
    """
    partial = target.with_name(f"{PARTIAL_PREFIX}{os.getpid()}-{target.name}")
    try:
        counts = _copy(url, partial)
        os.link(partial, target)  # fails, and replaces nothing, where a file appeared since
        sync_folder(target.parent)  # a power loss after "backed up" keeps the name
    except FileExistsError:
        raise UserError(f"FILE {target}: already exists (made while the backup ran); "
                        "expected a new file name") from None
    except (sqlite3.Error, OSError) as err:
        raise UserError(f"FILE {target}: the backup of {display_url(url)} failed "
                        f"({one_line(str(err) or type(err).__name__)}); nothing was written "
                        "there") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            partial.unlink()
    return BackupDone(target, revision, *counts, target.stat().st_size)


def _copy(url: URL, partial: Path) -> tuple[int, int]:
    """`VACUUM INTO` `partial`, made private, synced and checked; its (matrices, runs)."""
    store = read_only_url(url).database  # `file:...?mode=ro`, immutable where none can write
    assert store is not None  # read_only_url always names the file
    source = sqlite3.connect(store, uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        source.execute("VACUUM INTO ?", (str(partial),))
    finally:
        source.close()
    os.chmod(partial, 0o600)  # results are private, as the store is
    copy = sqlite3.connect(f"file:{partial}?mode=ro", uri=True)
    try:
        checked = copy.execute("PRAGMA quick_check").fetchone()[0]
        if checked != "ok":
            raise sqlite3.DatabaseError(f"the copy fails SQLite's quick_check: {checked}")
        matrices = copy.execute("SELECT count(*) FROM matrices").fetchone()[0]
        runs = copy.execute("SELECT count(*) FROM runs").fetchone()[0]
    finally:
        copy.close()
    with open(partial, "rb+") as written:
        os.fsync(written.fileno())
    return matrices, runs


def postgres_refusal(url: URL, source: str) -> UserError:
    """What to do instead for a PostgreSQL store: its own tool, which copies while others
    write, as this does for SQLite."""
    # The URL without its password (pg_dump reads that from PGPASSWORD or ~/.pgpass).
    bare = url._replace(drivername="postgresql", password=None)  # `set` keeps a None field
    shown = display_url(bare.difference_update_query(SECRET_QUERY_KEYS))
    return UserError(f"{source}: {shown} is a PostgreSQL store; back it up with PostgreSQL's "
                     f"own tool: pg_dump -Fc -f FILE '{shown}' (the password from PGPASSWORD or "
                     "~/.pgpass), restored with pg_restore")
