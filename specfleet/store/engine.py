"""Database URLs and SQLAlchemy engines: SQLite (default) and PostgreSQL via psycopg 3.

SQLite runs in WAL mode with foreign keys on and a long busy timeout; writes open their
transaction with `BEGIN IMMEDIATE`, so concurrent writers queue instead of failing with
"database is locked" half-way through a transaction (in short waits, so Ctrl-C is heard).
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import re
import shlex
import sqlite3
import sys
import time
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError
from tenacity import retry, retry_if_exception, stop_after_delay, wait_fixed

from specfleet import jsontext
from specfleet.dirs import user_data_dir
from specfleet.errors import UserError
from specfleet.settings import DB, expand_user
from specfleet.store.openedfile import OpenedFile
from specfleet.store.sidefiles import (
    check_room,
    check_wal_is_its_own,
    fold_wal_into_store,
    no_room_for_side_files,
)
from specfleet.userfiles import check_folder_path, refuse_unreachable

BUSY_TIMEOUT_S = 60.0
# One slice of a writer's wait for the write lock: SQLite sleeps it in C, deaf to Ctrl-C.
LOCK_SLICE_S = 0.25
LOCK_SAY_S = 5.0  # a writer waiting this long for another's write lock says so, once
# Execution option that makes a SQLite transaction begin with BEGIN IMMEDIATE.
WRITE_OPTION = "specfleet_write"
_SCHEMES = ("sqlite:///PATH", "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DB")
# Query keys SQLAlchemy's psycopg dialect takes more than once: a multi-host URL's hosts.
_MULTI_HOST_KEYS = ("host", "port")
_ESCAPES = ("(an '@', ':', '/', '?' or '#' in the user name, password or database name is "
            "written %40, %3A, %2F, %3F or %23)")
_HOST_NAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_.])?")
# `sqlite:x.db`, `postgresql:/db`: a URL short of its `//`, else read as a file of that name
_SCHEME_NO_SLASHES = re.compile(r"(sqlite|postgres(?:ql)?)(\+\w+)?:(?!//)", re.IGNORECASE)


def default_db_path() -> Path:
    """The default SQLite file: `specfleet.db` in the platform's user data dir."""
    return user_data_dir() / "specfleet.db"


def resolve_url(url: str | None = None, create_dir: bool = True) -> URL:
    """Turn `--db`, else `SPECFLEET_DB`, else the default file into a SQLAlchemy URL.

    Args:
        url: a SQLAlchemy URL (`sqlite:///...`, `postgresql+psycopg://...`) or a file path.
        create_dir: create the default store's directory (mode 0700) if missing.

    Returns:
        The parsed URL; `postgresql://` is read as `postgresql+psycopg://`.

    Raises:
        UserError: an unsupported scheme or an unparsable URL.
    """
    source = store_source(url)
    raw = url if url is not None else DB.read() or ""
    if raw.isspace() or url == "":  # an empty flag is a script's unset variable, not a default
        raise UserError(f"{source}: {raw!r} is blank; expected {' or '.join(_SCHEMES)} or a "
                        "SQLite file path")
    if not raw:
        return _default_store_url(create_dir)
    if raw != raw.strip():  # a pasted space would silently make a second, empty store
        raise UserError(f"{source}: {display_raw(raw)!r} starts or ends with whitespace; "
                        f"expected {' or '.join(_SCHEMES)} or a SQLite file path without it")
    if "\x00" in raw:  # a file path's ValueError was a traceback
        raise UserError(f"{source}: contains a NUL character; expected {' or '.join(_SCHEMES)} "
                        "or a SQLite file path")
    return _database_url(raw, source) if "://" in raw else _file_url(raw, source)


def _default_store_url(create_dir: bool) -> URL:
    """The default SQLite file, its folder made (mode 0700) when asked."""
    path = default_db_path()
    if create_dir and not path.parent.is_dir():
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)  # results are private
        except OSError as err:  # $HOME a file, or on a read-only mount
            raise UserError(f"--db not given: the default store's folder {path.parent} "
                            f"cannot be made ({err.strerror}); expected --db or "
                            f"{DB.name} naming a store you can write") from None
    return URL.create("sqlite", database=str(path))


def _file_url(raw: str, source: str) -> URL:
    """A SQLite file path given without a scheme."""
    if scheme := _SCHEME_NO_SLASHES.match(raw):  # not the rest: it may hold a password
        raise UserError(f"{source}: starts with {scheme[0]!r} but no '//' follows; expected "
                        f"{' or '.join(_SCHEMES)} (a file of that name: ./{scheme[0]}...)")
    if raw.endswith("/"):  # Path() drops it: `x.db/` read or made the file x.db
        raise UserError(f"{source} {display_raw(raw)!r}: a trailing '/' names a folder; "
                        "expected a SQLite file path")
    try:
        resolved = expand_user(raw, source).resolve()
    except (RuntimeError, OSError) as err:  # a link loop: RuntimeError before Python 3.13
        raise UserError(f"{source}: {display_raw(raw)}: cannot be followed ({err}); "
                        "expected a SQLite file path") from None
    return _check_file_name(URL.create("sqlite", database=str(resolved)), source)


def _database_url(raw: str, source: str) -> URL:
    """A URL with a scheme: parsed, its driver, options and fragment checked."""
    tail = raw.split("://", 1)[1]
    if tail.split("?", 1)[0].count("@") > 1:  # else read as host `cret@h`: the password shown
        raise UserError(f"{source}: {display_raw(raw)}: more than one '@' before the host; "
                        f"expected {_SCHEMES[1]} {_ESCAPES}")
    try:
        parsed = make_url(raw)
    except (ArgumentError, ValueError):  # ValueError: a port that is not a number
        shown = display_raw(raw)
        hint = f" {_ESCAPES}" if tail.count("@") > 1 else ""
        raise UserError(f"{source}: cannot parse {shown!r}; expected {' or '.join(_SCHEMES)}"
                        f"{hint}") from None
    if twice := next((key for key, value in parsed.query.items()
                      if isinstance(value, tuple) and key not in _MULTI_HOST_KEYS),
                     None):  # SQLAlchemy keeps both as a tuple, which libpq reads as one text
        raise UserError(f"{source}: {display_raw(raw)}: the option {twice!r} is given twice; "
                        "expected it once")
    return _refuse_fragment(raw, _check_driver(parsed, source), source)


def store_source(url: str | None) -> str:
    """What a message about the store names: `--db` when given, else `SPECFLEET_DB` when
    set; the default file is `--db`'s to change."""
    return DB.name if url is None and DB.read() is not None else "--db"


def display_raw(raw: str) -> str:
    """A URL the user typed, with any password replaced (it may not parse): up to the last
    `@`, as a password's own unescaped `@` would show the rest of it."""
    head, sep, tail = raw.partition("://")
    auth, at, host = tail.rpartition("@")
    if sep and at and ":" in auth:
        tail = f"{auth.split(':', 1)[0]}:***@{host}"
    return head + sep + tail


def _check_driver(parsed: URL, source: str) -> URL:
    if parsed.drivername in ("postgresql", "postgres", "postgresql+psycopg"):
        _check_pg_parts(parsed, source)
        return parsed.set(drivername="postgresql+psycopg")
    if parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        if not (parsed.database or "").strip() or parsed.database == ":memory:":
            raise UserError(f"{source}: a SQLite URL needs a file path (sqlite:///PATH)")
        if parsed.query:  # SQLite would ignore them, with a warning of several lines
            raise UserError(f"{source}: {display_url(parsed)}: SQLite URLs take no query "
                            "options; expected sqlite:///PATH")
        return _check_file_name(parsed.set(drivername="sqlite"), source)
    scheme = parsed.drivername
    raise UserError(
        f"{source}: unsupported database scheme {scheme!r}; expected {' or '.join(_SCHEMES)}"
    )


def _refuse_fragment(raw: str, url: URL, source: str) -> URL:
    """Refuse a `#` after the host: to the user a URL fragment, to SQLAlchemy part of the
    file or database name (`x.db#frag` would be a new, empty store). A password's own `#`
    comes before the host's `@` and is kept."""
    if "#" in raw.split("://", 1)[1].rpartition("@")[2]:
        expected = _SCHEMES[0] if url.get_backend_name() == "sqlite" else _SCHEMES[1]
        raise UserError(f"{source}: {display_raw(raw)}: a database URL takes no #fragment; "
                        f"expected {expected} (a # in a name is written %23)")
    return url


def _check_file_name(url: URL, source: str) -> URL:
    """Refuse a SQLite path the file system cannot name (every later look at it would raise)."""
    try:
        os.stat(url.database or "")
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:
            raise UserError(f"{source}: {url.database}: the path or one of its names is too "
                            "long for the file system; expected a SQLite file path") from None
    refuse_unreachable(Path(url.database or ""), source)  # every later look would raise
    return url


def _check_pg_parts(url: URL, source: str) -> None:
    where = display_url(url)
    if not url.host and "host" not in url.query:
        raise UserError(f"{source}: {where}: no host; expected {_SCHEMES[1]}")
    try:  # the hosts as libpq gets them, ?host=H1:P1&host=H2:P2 and ?host=H1,H2 included
        pg = url.set(drivername="postgresql+psycopg")
        params = pg.get_dialect()().create_connect_args(pg)[1]
    except (ArgumentError, ValueError) as err:  # ?port=x, or more ports than hosts
        raise UserError(f"{source}: {where}: {err}; expected {_SCHEMES[1]} (several hosts: "
                        "?host=H1,H2&port=P1,P2)") from None
    hosts = str(params.get("host") or "")
    bad = [h for h in hosts.split(",") if not _is_host(h)] if hosts else []
    if bad:
        raise UserError(f"{source}: {where}: host {bad[0]!r} is neither a host name nor an IP "
                        f"address; expected {_SCHEMES[1]} (an IPv6 address in brackets: [::1])")
    if url.port is not None and not 0 < url.port < 65536:
        raise UserError(f"{source}: {where}: port {url.port} is not between 1 and 65535")
    if not url.database:
        raise UserError(f"{source}: {where}: no database name; expected {_SCHEMES[1]}")


def _is_host(text: str) -> bool:
    """A host name, an IP address, or a Unix socket folder (libpq takes a comma list)."""
    if text.startswith("/") or (_HOST_NAME.fullmatch(text) and _dns_sized(text)):
        return True
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _dns_sized(name: str) -> bool:
    """Labels of 1-63 characters, 253 in all (a trailing dot allowed): past that the
    resolver's IDNA codec raises UnicodeError where a connection would fail."""
    name = name.removesuffix(".")
    return len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split("."))


def check_store_folder(url: URL, source: str) -> None:
    """Refuse a SQLite store whose folder does not exist (nothing creates it but the user;
    the default store's folder is made by `resolve_url`).

    Raises:
        UserError: naming the folder, or what is in its way.
    """
    if url.get_backend_name() != "sqlite":
        return
    folder = Path(url.database or "").parent
    if not folder.is_dir():
        check_folder_path(folder, source)  # a file in the way says so
        raise UserError(f"{source}: directory {folder} does not exist; expected a store in "
                        "an existing folder (make it first)")


def check_writable(url: URL, source: str) -> None:
    """Refuse a SQLite file (or its directory, where WAL keeps its side files) we can't write.

    Raises:
        UserError: naming the path and what is wrong with it.
    """
    if url.get_backend_name() != "sqlite":
        return
    check_store_folder(url, source)
    path = Path(url.database or "")
    if path.exists() and not path.is_file():
        raise UserError(f"{source}: {path} is not a regular file; give a SQLite file path")
    if path.exists() and not os.access(path, os.R_OK | os.W_OK):
        raise UserError(f"{source}: the SQLite file {path} is read-only; specfleet needs to write it")
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise UserError(
            f"{source}: directory {path.parent} is read-only; SQLite needs to write its WAL files there"
        )
    check_wal_is_its_own(path, source)
    check_room(path, source)


def check_readable(url: URL, source: str) -> None:
    """Refuse a SQLite store that is missing or not a readable file (read commands never
    create one).

    Raises:
        UserError: naming the path and how to create a store.
    """
    if url.get_backend_name() != "sqlite":
        return
    assert url.database is not None  # resolve_url refuses a SQLite URL without a file
    path = Path(url.database)
    if not path.exists():
        if path == default_db_path():  # the user named no store: `--db` is not to blame
            raise UserError(f"nothing stored yet: the default store {path} does not exist; a "
                            "writing command (`specfleet matrix run`, `bench`, `job generate`) "
                            "creates it, or name another with --db or $SPECFLEET_DB")
        check_store_folder(url, source)  # nothing could create it there: say that instead
        raise UserError(f"{source}: no store at {path}; {upgrade_command(url, source)} or a "
                        "writing command (`specfleet matrix run`) creates one")
    if not path.is_file():
        raise UserError(f"{source}: {path} is not a regular file; give a SQLite file path")
    if not os.access(path, os.R_OK):
        raise UserError(f"{source}: cannot read the SQLite file {path} (permission denied)")
    check_wal_is_its_own(path, source)
    check_room(path, source, reading=True)


def create_private_file(url: URL, source: str) -> OpenedFile | None:
    """Create a new SQLite file as mode 0600 before SQLite does (it would use 0644; its WAL
    side files copy the main file's mode).

    Returns:
        The file made, for `sidefiles.remove_unfinished_store` should the first write be
        refused; None when it was there already (or for PostgreSQL).
    """
    if url.get_backend_name() != "sqlite":
        return None
    assert url.database is not None  # resolve_url refuses a SQLite URL without a file
    try:
        os.close(os.open(url.database, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                         0o600))
    except FileExistsError:
        return None
    except OSError as err:
        raise UserError(f"{source}: cannot create the SQLite file {url.database} ({err.strerror})"
                        ) from None
    return OpenedFile.of(url)


# Query keys libpq (and so psycopg) reads a password from: `?password=` works as well as
# `user:password@` does, and was shown on every page of the web view.
SECRET_QUERY_KEYS = ("password", "sslpassword")


def display_url(url: URL) -> str:
    """The URL as text with any password hidden, in its user part or its query."""
    hidden = {key: "HIDDEN" for key in SECRET_QUERY_KEYS if key in url.query}
    text = url.update_query_dict(hidden).render_as_string(hide_password=True)
    return text.replace("=HIDDEN", "=***")  # `***` itself would be shown %-escaped


def _has_password(url: URL) -> bool:
    return url.password is not None or any(key in url.query for key in SECRET_QUERY_KEYS)


def upgrade_command(url: URL, source: str) -> str:
    """The `specfleet db upgrade` that upgrades this store, in backquotes: naming `--db` when
    that named it, since a bare one upgrades the default store (or `SPECFLEET_DB`'s)."""
    if source != "--db" or url == URL.create("sqlite", database=str(default_db_path())):
        return "`specfleet db upgrade`"
    if url.get_backend_name() == "sqlite":
        return f"`specfleet db upgrade --db {shlex.quote(url.database or '')}`"
    if _has_password(url):  # never print it; a hidden one cannot be pasted back
        return "`specfleet db upgrade` with the same --db"
    return f"`specfleet db upgrade --db {shlex.quote(display_url(url))}`"


def make_engine(url: URL, read_only: bool = False) -> Engine:
    """Create the engine for `url` with specfleet's connection settings.

    Args:
        url: the store.
        read_only: connect so that nothing can be written (SQLite `mode=ro`, PostgreSQL
            `default_transaction_read_only`); the file or schema is never created.
    """
    if url.get_backend_name() == "sqlite":
        return _sqlite_engine(url, read_only)
    # Defaults only: a connect_timeout or application_name in the URL is the user's to set.
    defaults = {"connect_timeout": 10, "application_name": "specfleet"}
    connect_args = {key: value for key, value in defaults.items() if key not in url.query}
    # NaN and Infinity in a JSON column as null, as `_sqlite_engine` writes them.
    engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args,
                           json_serializer=jsontext.dumps)
    event.listen(engine, "connect",
                 lambda dbapi_conn, _record: _postgres_session(dbapi_conn, read_only))
    return engine


def _postgres_session(dbapi_conn, read_only: bool) -> None:
    """Set a new PostgreSQL session up as SET commands, never as libpq `options` (those would
    replace the URL's `options=` and PGOPTIONS, a search_path among them): read-only where
    asked, and a lock wait bounded at BUSY_TIMEOUT_S (as SQLite's) unless the URL, the role or
    the database sets one; else a write behind another session's lock waits for ever."""
    with dbapi_conn.cursor() as cur:
        if read_only:
            cur.execute("SET default_transaction_read_only = on")
        cur.execute("SHOW lock_timeout")
        if cur.fetchone()[0] == "0":
            cur.execute(f"SET lock_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
    dbapi_conn.commit()  # SET in a transaction rolled back would be undone


def read_only_url(url: URL) -> URL:
    """A SQLite URL that opens the file read-only (immutable where no writer can have it open)."""
    assert url.database is not None  # resolve_url refuses a SQLite URL without a file
    path = Path(url.database).resolve()
    options = "mode=ro"
    if _unwritable_closed_store(path):
        options += "&immutable=1"
    return URL.create("sqlite", database=f"file:{quote(str(path))}?{options}",
                      query={"uri": "true"})


def _unwritable_closed_store(path: Path) -> bool:
    """A store in a folder we cannot write, or on a disk with no room left, with no WAL file
    beside it: no writer has it open (a writer keeps its -wal there), and SQLite cannot
    create the side files a WAL read needs, so it is read as immutable (a read-only mount,
    another user's archive, a full disk). A writer that starts while we read is not seen:
    immutable ignores the WAL."""
    unwritable = not os.access(path.parent, os.W_OK) or no_room_for_side_files(path.parent)
    return unwritable and not path.with_name(path.name + "-wal").exists()


def remove_empty_side_files(url: URL) -> None:
    """Once a store's connections are closed, have SQLite remove the -wal and -shm files a
    read-only connection leaves beside a WAL store (only a connection that can write
    checkpoints and deletes them when it closes last). Only while the -wal is empty: there is
    nothing to checkpoint, so no byte of the store changes; and SQLite deletes them only when
    no other connection has the store open."""
    if url.get_backend_name() != "sqlite":
        return
    path = Path(url.database or "")
    try:
        if path.with_name(path.name + "-wal").stat().st_size:
            return  # a writer's frames (or a writer at work): theirs to checkpoint
    except OSError:
        return  # no -wal: nothing was left behind
    with contextlib.suppress(sqlite3.Error):  # best effort: what SQLite keeps stays
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=rw", uri=True,
                               timeout=0, isolation_level=None)
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # opens the WAL
        finally:
            conn.close()


def _sqlite_engine(url: URL, read_only: bool = False) -> Engine:
    target = read_only_url(url) if read_only else url
    # JSON columns as PostgreSQL's take them (NaN and Infinity are no JSON: null), so a
    # sensor's NaN is stored, and read back, alike on both backends.
    engine = create_engine(target, connect_args={"timeout": BUSY_TIMEOUT_S},
                           json_serializer=jsontext.dumps)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        # We emit BEGIN ourselves (below); pysqlite's implicit transactions would defer it.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if read_only:
            cur.execute("PRAGMA query_only = ON")
            cur.close()
            return
        cur.execute("PRAGMA foreign_keys = ON")
        _enable_wal(cur)
        # WAL + NORMAL: commits survive a crashed process; only power loss can drop the last.
        cur.execute("PRAGMA synchronous = NORMAL")
        cur.close()

    if not read_only:
        # Before SQLAlchemy closes a writer's connection (engine.dispose, a recycled one).
        event.listen(engine, "close", lambda dbapi_conn, _record: fold_wal_into_store(dbapi_conn))

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        if conn.get_execution_options().get(WRITE_OPTION, False):
            _begin_immediate(conn.connection.driver_connection)
        else:
            conn.exec_driver_sql("BEGIN")

    return engine


def _begin_immediate(dbapi_conn: sqlite3.Connection) -> None:
    """`BEGIN IMMEDIATE`, waiting up to `BUSY_TIMEOUT_S` for another writer's lock in
    slices of `LOCK_SLICE_S`: SQLite's busy wait sleeps in C, so one whole wait would hold
    Ctrl-C and SIGTERM (a KeyboardInterrupt) until it ends."""
    started = time.monotonic()
    said = False
    dbapi_conn.execute(f"PRAGMA busy_timeout = {int(LOCK_SLICE_S * 1000)}")
    try:
        while True:
            try:
                dbapi_conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as err:
                waited = time.monotonic() - started
                if "locked" not in str(err) or waited >= BUSY_TIMEOUT_S:
                    raise
                if waited >= LOCK_SAY_S and not said:  # else up to a minute without a word
                    said = True
                    print(f"{_file_of(dbapi_conn)}: waiting for another process's write to "
                          f"this SQLite store to finish (up to {BUSY_TIMEOUT_S:g} s)",
                          file=sys.stderr, flush=True)
    finally:
        dbapi_conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")


def _file_of(dbapi_conn: sqlite3.Connection) -> str:
    """The file of a SQLite connection's main database."""
    rows = dbapi_conn.execute("PRAGMA database_list").fetchall()
    return next((row[2] for row in rows if row[1] == "main"), "the store")


@retry(retry=retry_if_exception(lambda err: isinstance(err, sqlite3.OperationalError)
                                and "locked" in str(err)),
       stop=stop_after_delay(BUSY_TIMEOUT_S), wait=wait_fixed(0.05), reraise=True)
def _enable_wal(cur) -> None:
    """Switch a new file to WAL. The switch needs a lock SQLite does not wait for (its busy
    handler is skipped there), so two processes opening one fresh file retry instead."""
    if cur.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
        cur.execute("PRAGMA journal_mode = WAL")
