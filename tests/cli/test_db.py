"""`specfleet db upgrade|current`, and every bad database a user can point it at."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import tempfile
import threading
import time
import traceback
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from typer.testing import CliRunner

from specfleet.cli.main import app
from specfleet.settings import JOURNAL_DIR
from specfleet.store import head_revision, open_store
from specfleet.store.engine import display_url, resolve_url
from tests.conftest import PG_PASSWORD, PG_PASSWORD_USER

NOBODY = 65534


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_upgrade_then_current(store_url):
    result = invoke("db", "current", "--db", store_url)
    assert result.exit_code == 0, result.output
    assert "revision: none" in result.output
    result = invoke("db", "upgrade", "--db", store_url)
    assert result.exit_code == 0, result.output
    assert result.output.strip().endswith(f"-> {head_revision()} (head)")
    result = invoke("db", "current", "--db", store_url)
    assert result.output.splitlines()[1] == f"revision: {head_revision()} (head)"
    again = invoke("db", "upgrade", "--db", store_url)
    assert again.output.strip().endswith(f": already at {head_revision()} (head); nothing to "
                                         "upgrade")


def test_upgrade_writes_back_what_the_journal_kept(tmp_path, monkeypatch):
    """A driver stopped by an outage keeps its results in the journal; `db upgrade` left
    them pending, so the store read them not done until some later run or resume."""
    from specfleet.store.journal import Journal
    from tests.store.factory import grid, result

    monkeypatch.setenv(JOURNAL_DIR.name, str(tmp_path / "journal"))
    url = f"sqlite:///{tmp_path / 'kept.db'}"
    runs = grid(repeats=1)
    with open_store(url) as store:
        store.create_matrix("demo", {}, runs)
        journal = Journal(store.url)
        journal.write(result(runs[0]))  # finished, then the store went away
    upgraded = invoke("db", "upgrade", "--db", url)
    assert upgraded.exit_code == 0, upgraded.output
    assert upgraded.stderr == ("journal: 1 finished result written to the store "
                               "(0 already there, 0 refused)\n")
    assert journal.pending() == []
    with open_store(url, read_only=True) as store:
        assert [r.status for r in store.runs()] == ["done", "pending"]
    again = invoke("db", "upgrade", "--db", url)
    assert again.exit_code == 0 and again.stderr == "", again.output


@pytest.mark.slow  # a real model: `calibrate --store`
def test_every_writing_command_says_what_it_wrote_back(tmp_path, monkeypatch):
    """`matrix run` and `resume` said the journal line; `calibrate --store`, `job generate`,
    `parity run` and the others wrote the journal back without a word."""
    import subprocess
    import sys

    from specfleet.store.journal import Journal
    from tests.store.factory import grid, result

    url = f"sqlite:///{tmp_path / 'kept.db'}"
    env = {**os.environ, JOURNAL_DIR.name: str(tmp_path / "journal")}
    monkeypatch.setenv(JOURNAL_DIR.name, env[JOURNAL_DIR.name])
    runs = grid(repeats=1)
    with open_store(url) as store:
        store.create_matrix("demo", {}, runs)
        Journal(store.url).write(result(runs[0]))  # finished, then the store went away
    specfleet = os.path.join(os.path.dirname(sys.executable), "specfleet")
    calibrated = subprocess.run(
        [specfleet, "calibrate", "-m", "smollm2-135m", "--max-width", "2", "--rounds", "1",
         "--steps", "2", "--reps", "1", "--prompt-len", "8", "--no-warm-up", "--store",
         "--db", url], env=env, capture_output=True, text=True, timeout=240)
    assert calibrated.returncode == 0, calibrated.stderr[-2000:]
    assert ("journal: 1 finished result written to the store (0 already there, 0 refused)\n"
            in calibrated.stderr), calibrated.stderr
    with open_store(url, read_only=True) as store:
        assert [r.status for r in store.runs()] == ["done", "pending"]


def test_current_on_a_missing_file_creates_nothing(tmp_path):
    path = tmp_path / "none.db"
    result = invoke("db", "current", "--db", str(path))
    assert result.exit_code == 0 and "no database file yet" in result.output
    assert not path.exists()


def test_env_var_is_honoured(tmp_path, monkeypatch):
    path = tmp_path / "env.db"
    monkeypatch.setenv("SPECFLEET_DB", str(path))
    assert invoke("db", "upgrade").exit_code == 0
    assert path.exists()
    assert invoke("db", "current").output.splitlines()[0] == f"url: sqlite:///{path}"


def test_current_hides_the_password(pg_server, pg_url):
    database = pg_url.rsplit("/", 1)[1]
    url = pg_server.url(database, PG_PASSWORD_USER, PG_PASSWORD)
    result = invoke("db", "current", "--db", url)
    assert result.exit_code == 0, result.output
    assert PG_PASSWORD not in result.output and f"{PG_PASSWORD_USER}:***@" in result.output


@pytest.mark.postgres
@pytest.mark.parametrize("command", ["db upgrade", "a writing open"])
def test_upgrade_says_once_that_it_waits_for_another_upgrade(pg_url, command, capsys):
    """`db upgrade`, and any command's first write to a store an older specfleet made,
    waited without a word while another process held the upgrade lock."""
    import psycopg

    from specfleet.store.migrate import PG_UPGRADE_LOCK

    def upgrade_now() -> str:
        """Upgrade the store as `command` does; what it said on standard error."""
        if command == "db upgrade":
            result = invoke("db", "upgrade", "--db", pg_url)
            assert result.exit_code == 0, result.output
            assert f"{head_revision()} (head)" in result.stdout
            return result.stderr
        with open_store(pg_url):  # every writing command opens its store so
            pass
        return capsys.readouterr().err

    dsn, key = pg_url.replace("+psycopg", ""), (PG_UPGRADE_LOCK,)
    with (psycopg.connect(dsn, autocommit=True) as holder,
          psycopg.connect(dsn, autocommit=True) as watcher):
        holder.execute("SELECT pg_advisory_lock(%s)", key)

        def release_once_waited_on() -> None:
            deadline = time.monotonic() + 10  # an upgrade that never waits fails below
            while time.monotonic() < deadline and not watcher.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE l.locktype = 'advisory' AND NOT l.granted "
                    "AND d.datname = current_database()").fetchone()[0]:
                time.sleep(0.02)
            holder.execute("SELECT pg_advisory_unlock(%s)", key)

        releaser = threading.Thread(target=release_once_waited_on)
        releaser.start()
        said = upgrade_now()
        releaser.join()
    where = display_url(resolve_url(pg_url))
    assert said == f"{where}: waiting for another upgrade of this store to finish\n"
    assert upgrade_now() == ""  # no one holds it: no line


def test_wrong_scheme():
    assert_one_line_error(invoke("db", "upgrade", "--db", "mysql://u@h/db"),
                          "--db", "'mysql'", "postgresql+psycopg://")


def test_unreachable_server():
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"postgresql+psycopg://u:secret@127.0.0.1:{port}/db"
    result = invoke("db", "upgrade", "--db", url)
    assert_one_line_error(result, "cannot reach PostgreSQL", f"127.0.0.1:{port}")
    assert "secret" not in result.output


def test_bad_credentials_write_nothing(pg_server, pg_url):
    database = pg_url.rsplit("/", 1)[1]
    url = pg_server.url(database, PG_PASSWORD_USER, "wrong-password")
    result = invoke("db", "upgrade", "--db", url)
    assert_one_line_error(result, "refused the credentials", PG_PASSWORD_USER)
    assert "wrong-password" not in result.output
    engine = create_engine(pg_url)
    with engine.connect() as conn:
        assert inspect(conn).get_table_names() == []
    engine.dispose()


def test_corrupted_file_is_left_as_it_was(tmp_path):
    path = tmp_path / "bad.db"
    path.write_bytes(b"this is not a database, just forty-odd bytes" * 10)
    before = digest(path)
    for command in ("upgrade", "current"):
        assert_one_line_error(invoke("db", command, "--db", str(path)), str(path),
                              "not a usable SQLite database")
    assert digest(path) == before


def _stamp(store_url: str, revision: str) -> None:
    engine = create_engine(resolve_url(store_url))
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :rev"), {"rev": revision})
    engine.dispose()


def test_future_revision_via_the_cli(store_url):
    invoke("db", "upgrade", "--db", store_url)
    _stamp(store_url, "0099")
    assert_one_line_error(invoke("db", "upgrade", "--db", store_url), "revision 0099", "newer")
    current = invoke("db", "current", "--db", store_url)
    assert current.exit_code == 0 and "0099 (newer than this specfleet" in current.output


def test_a_stamp_no_specfleet_wrote_is_not_called_newer(store_url):
    invoke("db", "upgrade", "--db", store_url)
    _stamp(store_url, "abc")
    for args in (("db", "upgrade"), ("db", "current"), ("results",)):
        assert_one_line_error(invoke(*args, "--db", store_url), "revision 'abc'",
                              "which no specfleet wrote", "expected a specfleet store")


def test_a_schema_that_does_not_match_its_stamp_is_refused_unchanged(tmp_path):
    path = tmp_path / "restamped.db"
    invoke("db", "upgrade", "--db", str(path))
    _stamp(str(path), "0005")  # its tables are head's: upgrading adds columns already there
    before = digest(path)
    assert_one_line_error(invoke("db", "upgrade", "--db", str(path)), "says revision 0005",
                          "do not match it", "nothing was changed")
    assert digest(path) == before


def test_db_current_on_another_applications_database_is_refused(tmp_path):
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER)")
    assert_one_line_error(invoke("db", "current", "--db", str(path)), "is not a specfleet store",
                          "holds tables users")


def test_db_current_leaves_the_default_folder_unmade(tmp_path, monkeypatch):
    monkeypatch.delenv("SPECFLEET_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    result = invoke("db", "current")
    assert result.exit_code == 0 and "no database file yet" in result.output, result.output
    assert not (tmp_path / "data").exists()


def _as_nobody(fn) -> dict:
    """Run `fn` as an unprivileged user when we are root (root ignores file modes)."""
    if os.geteuid() != 0:
        return fn()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: drop privileges, report through the pipe, never return to pytest
        try:
            os.chdir("/")  # pytest's temp folders are root's own
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            payload = json.dumps(fn())
        except BaseException as err:  # noqa: BLE001 - reported to the parent
            payload = json.dumps({"child_error": repr(err), "trace": traceback.format_exc()[-1500:]})
        os.write(write, payload.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        data = pipe.read()
    os.waitpid(pid, 0)
    return json.loads(data)


READS = (("db", "current"), ("matrix", "list"), ("results",))


def _import_while_root(*commands: tuple[str, ...]) -> None:
    """Run `commands` once as root on a spare store: the unprivileged child may not read the
    interpreter's own folders (a root-only home, as on this box) to import them."""
    spare = Path(tempfile.mkdtemp(prefix="specfleet-ro-spare-")) / "spare.db"
    try:
        open_store(str(spare)).close()
        for args in commands:
            assert invoke(*args, "--db", str(spare)).exit_code == 0, args
    finally:
        shutil.rmtree(spare.parent, ignore_errors=True)


@pytest.fixture
def unwritable_store(monkeypatch):
    """A store file (0444, no side files) in a folder (0755, root's) that the unprivileged
    user of `_as_nobody` can write neither; yields (path, its digest); checks neither changed."""
    folder = Path(tempfile.mkdtemp(prefix="specfleet-ro-"))
    # The unprivileged user's own journal folder (the suite's is root's, 0700).
    journal = Path(tempfile.mkdtemp(prefix="specfleet-ro-journal-"))
    if os.geteuid() == 0:
        os.chown(journal, NOBODY, NOBODY)
    monkeypatch.setenv(JOURNAL_DIR.name, str(journal))
    try:
        path = folder / "ro.db"
        open_store(str(path)).close()
        for side in folder.glob("ro.db-*"):
            side.unlink()
        path.chmod(0o444)
        folder.chmod(0o755)
        before = digest(path)
        yield path
        assert digest(path) == before and sorted(os.listdir(folder)) == ["ro.db"]
    finally:
        for item in folder.iterdir():
            item.unlink()
        folder.rmdir()
        shutil.rmtree(journal, ignore_errors=True)


def test_read_only_file_is_refused_and_untouched(unwritable_store):
    def attempt() -> dict:
        result = invoke("db", "upgrade", "--db", str(unwritable_store))
        return {"code": result.exit_code, "output": result.output}

    _import_while_root(("db", "current"))
    got = _as_nobody(attempt)
    assert got.get("code") == 2, got
    lines = got["output"].strip().splitlines()
    assert len(lines) == 1 and "read-only" in lines[0] and str(unwritable_store) in lines[0]


def test_a_store_in_a_folder_we_cannot_write_is_read_and_left_as_it_was(unwritable_store):
    # A read-only mount or another user's archive: SQLite cannot create the side files a WAL
    # read needs there, so reads open it immutable instead of failing "cannot write".
    def attempt() -> dict:
        return {" ".join(args): [(r := invoke(*args, "--db", str(unwritable_store))).exit_code,
                                 r.output] for args in READS}

    _import_while_root(*READS)
    got = _as_nobody(attempt)
    assert "child_error" not in got, got
    for command, (code, output) in got.items():
        assert code == 0 and "error" not in output, (command, output)
    assert "revision: " in got["db current"][1]


def test_reads_leave_no_side_files_beside_the_store(tmp_path):
    """Every read of a closed WAL store left an empty -wal and a -shm file beside it."""
    path = tmp_path / "s.db"
    open_store(str(path)).close()
    for args in READS:
        assert invoke(*args, "--db", str(path)).exit_code == 0, args
        assert sorted(os.listdir(tmp_path)) == ["s.db"], args


def _kill_a_writer(path: Path) -> None:
    """Leave beside `path` the -wal and -shm files a killed writer leaves."""
    pid = os.fork()
    if pid == 0:  # child: open, read, die without closing
        sqlite3.connect(path).execute("SELECT 1 FROM sqlite_master").fetchall()
        os._exit(0)
    os.waitpid(pid, 0)


def test_a_read_that_cannot_open_the_store_says_it_could_not_read():
    """A store shared read-only (0644) beside side files its writer left that this user cannot
    read (made while the store was private): every read said `cannot write the SQLite file`,
    a write no read command does."""
    folder = Path(tempfile.mkdtemp(prefix="specfleet-shared-"))
    path = folder / "s.db"
    try:
        folder.chmod(0o755)
        open_store(str(path)).close()
        _kill_a_writer(path)
        path.chmod(0o644)
        for side in folder.glob("s.db-*"):
            side.chmod(0o000)
        _import_while_root(*READS)
        got = _as_nobody(lambda: {" ".join(args): invoke(*args, "--db", str(path)).output
                                  for args in READS})
    finally:
        shutil.rmtree(folder)
    said = (f"error: --db: cannot read the SQLite file {path} (unable to open database file); "
            "expected it and any -wal and -shm file beside it readable by this user\n")
    assert got == {" ".join(args): said for args in READS}


def test_open_store_refuses_a_missing_directory(tmp_path):
    from specfleet.errors import UserError

    with pytest.raises(UserError, match="does not exist"):
        open_store(str(tmp_path / "no" / "such" / "dir.db"))
