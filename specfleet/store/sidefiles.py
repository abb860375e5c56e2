"""The files SQLite keeps beside a WAL store, `-wal` and `-shm`: room for the -shm before a
connection maps it, a -wal that cannot be the store's, no write left in the -wal alone once a
writer closes, and no store file left by a first write that was refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import struct
from pathlib import Path

from specfleet.store.errors import StoreDamaged, StoreUnreachable
from specfleet.store.openedfile import OpenedFile

# Room a WAL connection needs beside the store: the -shm's first 32 KiB, and some to spare.
SIDE_FILES_BYTES = 64 * 1024
# How long a closing writer waits for readers before leaving its checkpoint part-done.
CLOSE_CHECKPOINT_WAIT_MS = 1000
_WAL_MAGIC = (0x377F0682, 0x377F0683)
_WAL_HEADER_BYTES = 32
_FRAME_HEADER_BYTES = 24
# SQLite's "dead man switch" byte of the -shm: every connection to the store holds it shared.
_SHM_DMS_BYTE = 128
_SQLITE_MAGIC = b"SQLite format 3\x00"
_LEAF_TABLE_PAGE = 0x0D


def wal_path(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def shm_path(path: Path) -> Path:
    return path.with_name(path.name + "-shm")


def no_room_for_side_files(folder: Path) -> bool:
    """Whether the disk of `folder` lacks room for the -shm a WAL connection makes: SQLite
    cannot make it there, fails `disk I/O error` and leaves a -wal and a 3-byte -shm."""
    try:
        info = os.statvfs(folder)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < SIDE_FILES_BYTES


def check_room(path: Path, source: str, reading: bool = False) -> None:
    """Refuse to open a WAL store whose disk has no room for its -shm. SQLite sizes the -shm
    with one byte written per 4 KiB and then writes through a shared map of it: where a file
    system allocates the rest of a page only then (blocks under 4 KiB, as ext4 makes on small
    volumes; copy-on-write), that write on a full disk killed the process with SIGBUS, without
    a word. A read goes on where it maps no new -shm: no -wal beside the store (it is read as
    immutable) or another process has it open (the -shm is made).

    Raises:
        StoreUnreachable: naming the file and the free space wanted (worth a retry).
    """
    if not no_room_for_side_files(path.parent):
        return
    if reading and (not wal_path(path).exists() or _open_elsewhere(path)):
        return
    verb = "read" if reading else "write"
    raise StoreUnreachable(f"{source}: cannot {verb} the SQLite file {path} now (its disk is "
                           f"full: SQLite needs {SIDE_FILES_BYTES // 1024} KiB for the -shm file "
                           "beside it); expected free space on its disk")


def _open_elsewhere(path: Path) -> bool:
    """Whether another process has the WAL store open (it holds the -shm's DMS byte). Asked
    only before this process opens the store: closing our descriptor drops our locks on it."""
    try:
        fd = os.open(shm_path(path), os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def check_wal_is_its_own(path: Path, source: str) -> None:
    """Refuse a -wal holding committed writes beside a file that cannot be its store: SQLite
    deletes it beside a missing or empty file (the writes of a store moved without its -wal,
    gone for good) and replays it into a database not in WAL mode (another store's pages read
    as this one's). A -wal beside another WAL store cannot be told from its own.

    Raises:
        StoreDamaged: naming the -wal and what lies beside it.
    """
    wal = wal_path(path)
    if not _holds_commits(wal):
        return
    beside = _not_a_wal_store(path)
    if beside is None:
        return
    raise StoreDamaged(f"{source}: {wal} holds committed writes, but {path} beside it {beside}, "
                       "so they are not its; expected that -wal beside the store it came from "
                       "(a store moved without it?): move it there, or delete it if that store "
                       "is gone")


def _not_a_wal_store(path: Path) -> str | None:
    """What shows `path` holds no WAL store ("does not exist", "is empty", ...), else None."""
    try:
        with open(path, "rb") as file:
            header = file.read(20)
    except FileNotFoundError:
        return "does not exist"
    except OSError:
        return None  # the open that follows says what is wrong
    if not header:
        return "is empty"
    if header.startswith(_SQLITE_MAGIC) and header[18:20] == b"\x01\x01":
        return "is a SQLite database not in WAL mode"
    return None


def _holds_commits(wal: Path) -> bool:
    """Whether a -wal holds a commit SQLite would replay: a frame of the header's salts that
    ends a transaction (frames of an earlier round, or uncommitted ones, are ignored)."""
    try:
        with open(wal, "rb") as file:
            header = file.read(_WAL_HEADER_BYTES)
            if len(header) < _WAL_HEADER_BYTES:
                return False
            magic, _version, page_bytes = struct.unpack(">III", header[:12])
            if magic not in _WAL_MAGIC or page_bytes < 512:
                return False
            while len(frame := file.read(_FRAME_HEADER_BYTES)) == _FRAME_HEADER_BYTES:
                if frame[8:16] != header[16:24]:
                    return False
                if struct.unpack(">I", frame[4:8])[0]:  # database size after a commit
                    return True
                file.seek(page_bytes, os.SEEK_CUR)
    except OSError:
        return False
    return False


def fold_wal_into_store(dbapi_conn: sqlite3.Connection) -> None:
    """Copy a closing writer's committed frames from the -wal into the store file and empty
    the -wal (`wal_checkpoint(TRUNCATE)`). SQLite does so itself only when the last
    connection closes: a writer that closed while a reader had the store open left its rows in
    the -wal alone, and a store file moved or copied without it lost them. Best effort: a
    reader inside a read past `CLOSE_CHECKPOINT_WAIT_MS`, or a full disk, leaves the rest to
    the next writer."""
    with contextlib.suppress(sqlite3.Error):
        dbapi_conn.execute(f"PRAGMA busy_timeout = {CLOSE_CHECKPOINT_WAIT_MS}")
        dbapi_conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def remove_unfinished_store(made: OpenedFile) -> None:
    """Remove the store file this command made when its first write was refused (a full disk,
    Ctrl-C): left, it read as an empty store. Only while its path still names that file, which
    holds no table, beside a -wal with no commit, and no other process has it open; with the
    side files SQLite left."""
    path = made.path
    try:
        info = path.stat()
    except OSError:
        return
    if (info.st_dev, info.st_ino) != (made.dev, made.ino) or not _holds_no_table(path):
        return
    if _holds_commits(wal_path(path)):
        return
    try:
        shm_fd: int | None = os.open(shm_path(path), os.O_RDWR | os.O_NOFOLLOW)
    except FileNotFoundError:
        shm_fd = None  # no WAL connection made one
    except OSError:
        return
    try:
        if shm_fd is not None:
            fcntl.lockf(shm_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE)
        for side in (wal_path(path), shm_path(path), path.with_name(path.name + "-journal")):
            side.unlink(missing_ok=True)
        path.unlink()
    except OSError:
        return  # another process has it open, or it went meanwhile: theirs
    finally:
        if shm_fd is not None:
            os.close(shm_fd)


def _holds_no_table(path: Path) -> bool:
    """Whether a SQLite file is empty or one page with no table: what a refused first write
    leaves (SQLite's switch to WAL writes the header page)."""
    try:
        with open(path, "rb") as file:
            head = file.read(108)
            size = os.fstat(file.fileno()).st_size
    except OSError:
        return False
    if size == 0:
        return True
    if len(head) < 108 or not head.startswith(_SQLITE_MAGIC):
        return False
    page_bytes = struct.unpack(">H", head[16:18])[0]
    page_bytes = 65536 if page_bytes == 1 else page_bytes
    cells = struct.unpack(">H", head[103:105])[0]
    return size <= page_bytes and head[100] == _LEAF_TABLE_PAGE and cells == 0
