"""A database's refusal said in one line the user can act on: a SQLite file it cannot read,
write or make sense of, a PostgreSQL role, password, option or server it cannot use."""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy.engine import URL

from specfleet.errors import UserError
from specfleet.store import engine
from specfleet.store.engine import display_url
from specfleet.store.errors import StoreDamaged, StoreUnreachable
from specfleet.store.sidefiles import no_room_for_side_files

# libpq's and psycopg's words for an option it cannot take (psycopg: `bad value for X: 'v'`)
_BAD_PG_OPTION = re.compile(r'invalid connection option|invalid \w+ value: "|bad value for ')
_UNDEFINED_TABLE_OR_COLUMN = ("42P01", "42703")  # PostgreSQL's SQLSTATEs
_GAVE_UP_WAITING = ("55P03", "57014")  # lock_not_available (lock_timeout), query_canceled


def translate_error(err: BaseException, url: URL, source: str,
                    reading: bool = False) -> UserError | None:
    """A one-line UserError for a connection problem the user can fix, else None (`err`: a
    SQLAlchemy `DBAPIError` or the driver's own error; `source`: what named the store, from
    `store_source`; `reading`: what failed was a read, not a write)."""
    text = str(getattr(err, "orig", err) or err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    where = display_url(url)
    low = text.lower()
    if url.get_backend_name() == "sqlite":
        return _sqlite_error(low, first, url.database or "", source, reading)
    if lacks_privilege(err):  # the server's words name the table, schema or database
        role = f"role {url.username!r}" if url.username else "this user's role"
        return UserError(f"{source}: PostgreSQL refused {role} at {where} ({first}); expected a "
                         "role that owns the database (createdb -O ROLE DBNAME) or holds its "
                         "privileges")
    if refuses_writes(err):  # else a write was a traceback, an upgrade blamed on the tables
        return read_only_server(source, url, first)
    if sqlstate(err) in _UNDEFINED_TABLE_OR_COLUMN:  # before "does not exist": a database's too
        return tables_do_not_match(source, where, first)
    if sqlstate(err) in _GAVE_UP_WAITING:  # "canceling statement due to lock timeout"
        return StoreUnreachable(f"{source}: cannot use PostgreSQL at {where} now ({first}: "
                                "another session held a lock, or the statement ran past "
                                "statement_timeout); expected that session to finish")
    if "no password supplied" in low:  # libpq's `fe_sendauth`: the server asked for one
        return UserError(f"{source}: PostgreSQL at {where} asks for a password and none was "
                         f"given ({first}); expected USER:PASSWORD in the URL, or PGPASSWORD "
                         "or ~/.pgpass")
    if "password authentication failed" in low or "authentication" in low:
        return UserError(f"{source}: PostgreSQL refused the credentials for {where} ({first})")
    if "does not exist" in low:
        return UserError(f"{source}: {first} (at {where})")
    if _BAD_PG_OPTION.search(low):  # libpq's words hold "connection": not a reachability problem
        return UserError(f"{source}: {where}: {first}; expected libpq's connection options after "
                         "the ? (sslmode=require, ...)")
    if any(word in low for word in ("connection", "timeout", "could not", "terminating",
                                    "resolve")):  # psycopg: "failed to resolve host"
        return StoreUnreachable(f"{source}: cannot reach PostgreSQL at {where} ({first})")
    return None


def _sqlite_error(low: str, first: str, path: str, source: str,
                  reading: bool) -> UserError | None:
    verb = "read" if reading else "write"
    if "readonly" in low or "read-only" in low or "unable to open" in low:
        if reading:  # reads check the file first (check_readable): mostly its -wal or -shm
            return UserError(f"{source}: cannot read the SQLite file {path} ({first}); expected "
                             "it and any -wal and -shm file beside it readable by this user")
        return UserError(f"{source}: cannot write the SQLite file {path} ({first})")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return StoreDamaged(f"{source}: {path} is not a usable SQLite database ({first})")
    if "no such table" in low or "no such column" in low:  # PostgreSQL: its SQLSTATE
        return tables_do_not_match(source, path, first)
    if "disk is full" in low:
        return StoreUnreachable(f"{source}: cannot {verb} the SQLite file {path} now ({first}); "
                                "expected free space on its disk")
    if "disk i/o" in low and no_room_for_side_files(Path(path).parent):  # no room for a -shm
        return StoreUnreachable(f"{source}: cannot {verb} the SQLite file {path} now ({first}: "
                                "its disk is full); expected free space on its disk")
    if "locked" in low:  # the busy timeout ran out behind another process's transaction
        held = "its lock" if reading else f"its write lock for {engine.BUSY_TIMEOUT_S:g} s"
        return StoreUnreachable(f"{source}: cannot {verb} the SQLite file {path} now ({first}: "
                                f"another process held {held}); expected that process to "
                                "finish its write")
    if "disk i/o" in low:
        return StoreUnreachable(f"{source}: cannot {verb} the SQLite file {path} now ({first})")
    return None


def tables_do_not_match(source: str, where: str, first: str) -> StoreDamaged:
    """The refusal of a store whose tables lack what its schema stamp says (`first`: the
    database's words naming the table or column)."""
    return StoreDamaged(f"{source}: {where}: its tables do not match its schema revision "
                        f"({first}); expected the store as specfleet left it (restore it from "
                        "a backup)")


def sqlstate(err: BaseException) -> str:
    """The PostgreSQL SQLSTATE of a driver error (or SQLAlchemy's wrapping of one); '' when
    there is none."""
    return getattr(getattr(err, "orig", err), "sqlstate", None) or ""


def lacks_privilege(err: BaseException) -> bool:
    """A PostgreSQL refusal for want of a privilege (SQLSTATE 42501: `permission denied for
    schema public`, `must be owner of table runs`): the role's to fix, not the schema's."""
    return sqlstate(err) == "42501"


def read_only_server(source: str, url: URL, why: str) -> UserError:
    """The refusal of a PostgreSQL server that takes no writes (`why`: what showed it)."""
    return UserError(f"{source}: PostgreSQL at {display_url(url)} is read-only ({why}); expected "
                     "a server that takes writes: the primary, not a standby, with "
                     "default_transaction_read_only off")


def refuses_writes(err: BaseException) -> bool:
    """A PostgreSQL refusal of a write in a read-only transaction (SQLSTATE 25006): a hot
    standby, or a database or role set to `default_transaction_read_only`."""
    return sqlstate(err) == "25006"
