"""Which SQLite file a store opened, so a write can tell that its path now names another file
(deleted, or replaced by a restore) and refuse rather than write where nothing keeps it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import URL

from specfleet.store.errors import StoreUnreachable


@dataclass(frozen=True)
class OpenedFile:
    """The SQLite file a store's connections opened: its absolute path (a later chdir
    changes nothing) and its device and inode."""

    path: Path
    dev: int
    ino: int

    @classmethod
    def of(cls, url: URL) -> OpenedFile | None:
        """The file at the URL's path now; None for PostgreSQL or when no file is there."""
        if url.get_backend_name() != "sqlite":
            return None
        path = Path(url.database or "").absolute()
        try:
            info = path.stat()
        except OSError:
            return None
        return cls(path, info.st_dev, info.st_ino)

    def check_in_place(self, source: str) -> None:
        """Refuse a write once the path no longer names this file: SQLite goes on writing to
        a deleted or renamed-away file, and what it writes there is gone, without a word,
        when the command ends.

        Raises:
            StoreUnreachable: worth retrying (the file may be put back); a driver's journal
                keeps its finished results meanwhile.
        """
        try:
            info = self.path.stat()
        except OSError:
            what = "deleted"
        else:
            if (info.st_dev, info.st_ino) == (self.dev, self.ino):
                return
            what = "replaced by another file"
        raise StoreUnreachable(f"{source}: the SQLite file {self.path} was {what} while "
                               "specfleet had it open; expected it back in place (a write to "
                               "the old file would be lost)")
