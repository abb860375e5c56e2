"""Create or upgrade the schema with the Alembic migrations shipped in the package.

Upgrades run inside one transaction holding a lock (SQLite: `BEGIN IMMEDIATE`; PostgreSQL:
`pg_advisory_xact_lock`), so two processes opening a fresh database at once both succeed:
the second waits, then finds the schema current. A database stamped with a revision this
code does not know (made by a newer specfleet) is refused before anything is written.

Alembic itself is imported only to upgrade (~0.7 s of every command's start otherwise): the
revisions are read off the migration files' `revision` / `down_revision` lines and the
database's stamp off Alembic's version table (tests/store/test_migrate.py checks both against
Alembic's own reading).
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, select, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import DBAPIError

from specfleet.errors import UserError, one_line
from specfleet.store.dberrors import lacks_privilege, refuses_writes, sqlstate
from specfleet.store.engine import WRITE_OPTION, display_url, upgrade_command
from specfleet.store.tables import Base

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
VERSION_TABLE = "alembic_version"  # Alembic's default, which migrations/env.py keeps
_REVISION_LINE = re.compile(r'^(down_revision|revision)\b[^=]*=\s*(?:"([^"]*)"|None)\s*$', re.M)
# Arbitrary fixed key of the PostgreSQL advisory lock that serialises upgrades.
PG_UPGRADE_LOCK = 7_361_120_418_205_001


class FutureSchemaError(UserError):
    """The database was written by a newer specfleet; it is left untouched."""


def alembic_config(connection: Connection | None = None) -> Config:
    """A programmatic Alembic config pointing at the packaged migrations."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def _revision_parents() -> dict[str, str | None]:
    """Each shipped revision and the one it follows, read off its migration file."""
    parents: dict[str, str | None] = {}
    for path in sorted((MIGRATIONS_DIR / "versions").glob("[0-9]*.py")):
        lines = dict((name, value) for name, value in _REVISION_LINE.findall(path.read_text()))
        parents[lines["revision"]] = lines.get("down_revision") or None
    return parents


def head_revision() -> str:
    """The newest revision this code knows: the one no other revision follows."""
    parents = _revision_parents()
    (head,) = set(parents) - set(parents.values())
    return head


def known_revisions() -> set[str]:
    """Every revision this code ships."""
    return set(_revision_parents())


def current_revision(conn: Connection) -> str | None:
    """The revision the database is stamped with (None: no schema yet)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


def check_known(rev: str | None, conn: Connection, url: URL, source: str) -> None:
    """Refuse another application's database and a revision newer than this code (`source`:
    what named the store, `--db` or `SPECFLEET_DB`)."""
    if rev is None:
        found = inspect(conn)
        # A view's name is taken as a table's is: one named `hosts` would fail the upgrade.
        held = {"tables": sorted(set(found.get_table_names()) - {"alembic_version"}),
                "views": sorted(found.get_view_names())}
        if not any(held.values()):
            return
        # Each statement sees what is committed when it starts (PostgreSQL's READ COMMITTED):
        # tables another opener just created came with their revision, read again here.
        rev = current_revision(conn)
        if rev is None:  # another application's database: never add our tables to it
            shown = ", ".join(f"{kind} {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}"
                              for kind, names in held.items() if names)
            raise UserError(
                f"{source}: {display_url(url)} is not a specfleet store (it holds {shown} "
                f"and no specfleet schema revision); point {source} at an empty database or a "
                "specfleet store"
            )
    if rev not in known_revisions() and is_newer(rev):
        raise FutureSchemaError(
            f"{source}: {display_url(url)} has schema revision {rev}, newer than this specfleet "
            f"(knows up to {head_revision()}); upgrade specfleet to use it"
        )
    if rev not in known_revisions():
        raise UserError(
            f"{source}: {display_url(url)} has schema revision {rev!r}, which no specfleet "
            f"wrote (revisions are 0001 to {head_revision()}); expected a specfleet store"
        )


def is_newer(rev: str) -> bool:
    """Whether an unknown stamp reads as a later revision than this code's head (led by a
    number past it), rather than one no specfleet wrote."""
    number = re.match(r"[0-9]+", rev)  # `0008`, `0008_more_columns`: the number leads
    return number is not None and int(number[0]) > int(head_revision())


def ensure_schema(engine: Engine, url: URL, source: str) -> str:
    """Create or upgrade the schema if needed; returns the revision now in place."""
    head = head_revision()
    with engine.connect() as conn:
        rev = current_revision(conn)
        check_known(rev, conn, url, source)
    if rev != head:
        upgrade(engine, url, source)
    return head


def check_readable_schema(engine: Engine, url: URL, source: str) -> str:
    """For read commands: the database must be a specfleet store at this code's revision.

    Returns:
        The revision.

    Raises:
        UserError: empty or another application's database, a revision behind head (run
            `specfleet db upgrade`, naming the store as `source` did), or one newer than this
            code.
    """
    with engine.connect() as conn:
        rev = current_revision(conn)
        check_known(rev, conn, url, source)
    if rev is None:
        raise UserError(f"{source}: {display_url(url)} is empty, not a specfleet store yet; a "
                        f"writing command or {upgrade_command(url, source)} creates the schema")
    if rev != head_revision():
        raise UserError(f"{source}: {display_url(url)} has schema revision {rev}, behind this "
                        f"specfleet's {head_revision()}; run {upgrade_command(url, source)} "
                        "first")
    return rev


def upgrade(engine: Engine, url: URL, source: str,
            on_wait: Callable[[str], None] | None = None) -> str | None:
    """Upgrade to head under the upgrade lock, in one transaction.

    Returns:
        The revision the store had once the lock was taken (None: empty); head means another
        process upgraded it meanwhile, or nothing was behind. The store is at head after.

    `on_wait` (default: standard error) is given one line when another process holds
    PostgreSQL's upgrade lock, before waiting for it: every command that upgrades a store,
    `db upgrade` or the first write of a newer specfleet, says why it stands still.
    """
    with engine.connect().execution_options(**{WRITE_OPTION: True}) as conn, conn.begin():
        if conn.dialect.name == "postgresql":
            _take_upgrade_lock(conn, url, on_wait or _to_stderr)
        rev = current_revision(conn)
        check_known(rev, conn, url, source)
        if rev != head_revision():
            from alembic import command

            try:
                command.upgrade(alembic_config(conn), "head")
            except DBAPIError as err:  # a schema that is not what its stamp says: rolled back
                if err.connection_invalidated or _not_the_schema(err):
                    raise  # connection_errors says what it is
                raise UserError(
                    f"{source}: {display_url(url)} says revision {rev or 'none'} but its tables "
                    f"do not match it ({one_line(str(err.orig))}); nothing was changed; expected "
                    "a store as specfleet left it") from None
        check_tables(conn)  # a head stamp over a table or column dropped by hand: rolled back
    return rev


def check_tables(conn: Connection) -> None:
    """Select no row of each table this code's head has, naming every column: a table or
    column dropped under a head stamp fails here as any read of it would (`connection_errors`
    says it in one line), not only once a command reads that column."""
    for table in Base.metadata.sorted_tables:
        conn.execute(select(*table.columns).limit(0))


def _take_upgrade_lock(conn: Connection, url: URL, on_wait: Callable[[str], None]) -> None:
    key = {"k": PG_UPGRADE_LOCK}
    if conn.execute(text("SELECT pg_try_advisory_xact_lock(:k)"), key).scalar():
        return
    # The wait can be long: another process migrates a large store.
    on_wait(f"{display_url(url)}: waiting for another upgrade of this store to finish")
    conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), key)


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _not_the_schema(err: DBAPIError) -> bool:
    """A failed upgrade statement that says nothing about the tables: a lock, a full disk, a
    role without the privilege (SQLSTATE 42501), a read-only server (25006), a server out of
    resources (class 53)."""
    state = sqlstate(err)
    words = str(err.orig).lower()
    return lacks_privilege(err) or refuses_writes(err) or state.startswith("53") or any(
        word in words for word in ("locked", "disk i/o", "disk is full"))
