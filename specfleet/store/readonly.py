"""A read-only `Store` for readers that must never write (`specfleet serve`).

SQLite: the file is opened with `mode=ro` and every connection sets `PRAGMA query_only`, so
a write fails inside SQLite. PostgreSQL: every session starts with
`default_transaction_read_only`, so the server refuses a write. The schema is checked, never
created or upgraded.
"""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL

from specfleet.errors import UserError
from specfleet.store.engine import (
    BUSY_TIMEOUT_S,
    check_readable,
    display_url,
    make_engine,
    read_only_url,
    resolve_url,
    store_source,
    upgrade_command,
)
from specfleet.store.migrate import check_known, current_revision, head_revision
from specfleet.store.store import Store, connection_errors


def open_read_only(url: str | None = None) -> Store:
    """Open an existing store for reading only (same URL rules as `open_store`).

    Raises:
        UserError: no such SQLite file, an unreachable server, no specfleet schema there, or a
            schema older or newer than this code (`specfleet db upgrade` fixes an older one).
    """
    resolved, source = resolve_url(url, create_dir=False), store_source(url)
    check_readable(resolved, source)  # a missing file: say how a store is made
    engine = _read_only_engine(resolved, source)
    with connection_errors(resolved, source, engine, reading=True), engine.connect() as conn:
        rev = current_revision(conn)
        check_known(rev, conn, resolved, source)
    where = display_url(resolved)
    if rev is None:
        engine.dispose()
        raise UserError(f"{source}: {where} holds no specfleet store yet (run a matrix first)")
    if rev != head_revision():
        engine.dispose()
        raise UserError(f"{source}: {where} has schema revision {rev}, older than this specfleet's "
                        f"{head_revision()}; run {upgrade_command(resolved, source)} (readers "
                        "never write)")
    return Store(engine, resolved, source)


def _read_only_engine(url: URL, source: str) -> Engine:
    if url.get_backend_name() != "sqlite":
        return make_engine(url, read_only=True)
    # The rule every read follows: a store in a folder we cannot write is read as immutable.
    engine = create_engine(read_only_url(url),
                           connect_args={"timeout": BUSY_TIMEOUT_S, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        dbapi_conn.execute("PRAGMA query_only = ON")

    return engine
