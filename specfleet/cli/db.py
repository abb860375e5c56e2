"""`specfleet db`: create/upgrade the result store's schema, show its revision, back it up."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specfleet.cli.options import DbOption
from specfleet.errors import UserError
from specfleet.jobs.resolve import counted
from specfleet.store.backup import back_up, backup_target, postgres_refusal
from specfleet.store.engine import (
    check_readable,
    check_store_folder,
    check_writable,
    create_private_file,
    default_db_path,
    display_url,
    make_engine,
    remove_empty_side_files,
    resolve_url,
    store_source,
    upgrade_command,
)
from specfleet.store.journal import Journal
from specfleet.store.migrate import (
    check_known,
    check_tables,
    current_revision,
    head_revision,
    is_newer,
    known_revisions,
    upgrade,
)
from specfleet.store.sidefiles import remove_unfinished_store
from specfleet.store.store import Store, connection_errors, refuse_foreign_sqlite

app = typer.Typer(help="The result store: schema upgrade, current revision and backups.",
                  no_args_is_help=True)


def _remove_unfinished(made) -> None:
    """A store file this upgrade made and could not fill (a full disk): left, it read as an
    empty store."""
    if made is not None:
        remove_unfinished_store(made)


@app.command("upgrade")
def upgrade_cmd(db: DbOption = None) -> None:
    """Create or upgrade the schema to this specfleet's newest revision, then write back the
    results a driver kept in this store's journal during an outage."""
    url, source = resolve_url(db), store_source(db)
    check_writable(url, source)
    refuse_foreign_sqlite(url, source)
    journal = Journal(url)  # a malformed SPECFLEET_JOURNAL_DIR: one line, before the upgrade
    made = create_private_file(url, source)
    engine = make_engine(url)
    with connection_errors(url, source, engine):
        try:
            before = upgrade(engine, url, source)  # read under the lock: another may upgrade
        except KeyboardInterrupt:  # else a bare `interrupted` leaves the store's state unsaid
            _remove_unfinished(made)
            raise KeyboardInterrupt(
                "an upgrade is one transaction, so the store is at its old revision or at head, "
                f"never between; {upgrade_command(url, source)} finishes it") from None
        except BaseException:
            _remove_unfinished(made)
            raise
        after = head_revision()
        typer.echo(f"{display_url(url)}: already at {after} (head); nothing to upgrade"
                   if before == after else
                   f"{display_url(url)}: {before or 'empty'} -> {after} (head)")
        written = journal.write_back(Store(engine, url, source))
    engine.dispose()
    if line := written.line():
        typer.echo(line, err=True)


@app.command("current")
def current_cmd(db: DbOption = None) -> None:
    """Show the database's schema revision and URL (password hidden); changes nothing."""
    url = resolve_url(db, create_dir=False)  # a read: the default folder stays unmade
    typer.echo(f"url: {display_url(url)}\nrevision: {_read_revision(url, store_source(db))}")


@app.command("backup")
def backup_cmd(
    file: Annotated[str, typer.Argument(
        metavar="FILE", help="The new file to write the copy to (never replaced).")],
    db: DbOption = None,
) -> None:
    """Copy a SQLite store to FILE as one moment of it, while others may write to it (a
    PostgreSQL store: pg_dump, named in the refusal)."""
    url, source = resolve_url(db, create_dir=False), store_source(db)
    if url.get_backend_name() != "sqlite":
        raise postgres_refusal(url, source)
    target = backup_target(file)
    check_readable(url, source)
    engine = make_engine(url, read_only=True)
    with connection_errors(url, source, engine, reading=True), engine.connect() as conn:
        rev = current_revision(conn)
        check_known(rev, conn, url, source)  # another application's file, a newer schema
    engine.dispose()
    if rev is None:
        remove_empty_side_files(url)
        raise UserError(f"{source}: {display_url(url)} holds no specfleet store yet; nothing "
                        "to back up")
    done = back_up(url, source, target, rev)
    remove_empty_side_files(url)
    typer.echo(f"{display_url(url)}: backed up to {done.path} (revision {done.revision}, "
               f"{counted(done.matrices, 'matrix', 'matrices')}, {counted(done.runs, 'run')}, "
               f"{done.size_bytes / 1e6:.1f} MB; SQLite's quick_check ok)")


def _read_revision(url, source: str) -> str:
    if url.get_backend_name() == "sqlite" and not Path(url.database).exists():
        if url.database != str(default_db_path()):  # `upgrade` makes the default's folder
            check_store_folder(url, source)  # `upgrade` could not create the file either
        return f"none (no database file yet; {upgrade_command(url, source)} creates it)"
    check_readable(url, source)  # a folder, a device or a named pipe (SQLite's open would wait)
    engine = make_engine(url, read_only=True)  # a read: no WAL switch, no side files needed
    with connection_errors(url, source, engine, reading=True), engine.connect() as conn:
        rev = current_revision(conn)
        if rev is None or (rev not in known_revisions() and not is_newer(rev)):
            check_known(rev, conn, url, source)  # another application's tables, a bad stamp
        if rev == head_revision():  # behind head, its tables are an older revision's
            check_tables(conn)
    engine.dispose()
    remove_empty_side_files(url)
    return _describe(rev, upgrade_command(url, source))


def _describe(rev: str | None, upgrading: str) -> str:
    head = head_revision()
    if rev is None:
        return f"none (empty; {upgrading} creates revision {head})"
    if rev == head:
        return f"{rev} (head)"
    if rev in known_revisions():
        return f"{rev} (behind head {head}; run {upgrading})"
    return f"{rev} (newer than this specfleet, which knows up to {head}; upgrade specfleet)"
