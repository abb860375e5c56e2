"""URL resolution: --db, SPECFLEET_DB, the default file, and refused schemes."""

from __future__ import annotations

from pathlib import Path

import pytest

from specfleet.errors import UserError
from specfleet.store.engine import default_db_path, display_url, resolve_url


def test_default_is_a_file_in_the_user_data_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("SPECFLEET_DB", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    url = resolve_url(None)
    assert url.drivername == "sqlite" and url.database == str(default_db_path())
    assert default_db_path() == tmp_path / "specfleet" / "specfleet.db"
    assert default_db_path().parent.is_dir()


def test_env_var_then_flag(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECFLEET_DB", str(tmp_path / "env.db"))
    assert resolve_url(None).database == str(tmp_path / "env.db")
    assert resolve_url(str(tmp_path / "flag.db")).database == str(tmp_path / "flag.db")


def test_bare_relative_path_becomes_absolute(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert resolve_url("runs.db").database == str(Path(tmp_path, "runs.db"))


def test_postgres_urls_use_psycopg():
    for raw in ("postgresql://u:pw@h:5/db", "postgres://u:pw@h:5/db",
                "postgresql+psycopg://u:pw@h:5/db"):
        url = resolve_url(raw)
        assert url.drivername == "postgresql+psycopg"
        assert display_url(url) == "postgresql+psycopg://u:***@h:5/db"


def test_a_password_in_the_query_is_hidden_too():
    # libpq reads `?password=` as it reads `u:pw@`; the web view showed it on every page.
    url = resolve_url("postgresql://u@h/db?sslmode=require&password=hunter2&sslpassword=k3y")
    assert url.query["password"] == "hunter2"  # still what the driver connects with
    shown = display_url(url)
    assert "hunter2" not in shown and "k3y" not in shown
    assert shown == "postgresql+psycopg://u@h/db?password=***&sslmode=require&sslpassword=***"


@pytest.mark.parametrize("raw, fragment", [
    ("mysql://u@h/db", "unsupported database scheme 'mysql'"),
    ("postgresql+psycopg2://u@h/db", "unsupported database scheme 'postgresql+psycopg2'"),
    ("sqlite://", "needs a file path"),
    ("sqlite:///:memory:", "needs a file path"),
    ("://nothing", "cannot parse"),
])
def test_refused_urls_name_the_flag(raw, fragment):
    with pytest.raises(UserError) as err:
        resolve_url(raw)
    assert str(err.value).startswith("--db: ") and fragment in str(err.value)


@pytest.mark.parametrize("host", ["[zz", "zz]", "a b", "-h", "h;x"])
def test_a_malformed_host_is_one_line_without_the_password(host):
    with pytest.raises(UserError) as err:
        resolve_url(f"postgresql+psycopg://u:s3cret@{host}/db")
    message = str(err.value)
    assert message.startswith("--db: ") and f"host {host!r} is neither" in message
    assert "s3cret" not in message and "\n" not in message


@pytest.mark.parametrize("url", [
    "postgresql://u@h:5432/db", "postgresql://u@db.example.org/db", "postgresql://u@127.0.0.1/db",
    "postgresql://u@[::1]:5432/db", "postgresql://u@h1,h2/db", "postgresql://u@my_host/db",
    "postgresql://u@/db?host=/var/run/postgresql"])
def test_hosts_libpq_takes_are_accepted(url):
    assert resolve_url(url).drivername == "postgresql+psycopg"


def test_an_unresolvable_host_is_unreachable_not_a_bug():
    from sqlalchemy.exc import OperationalError

    from specfleet.store.dberrors import translate_error
    from specfleet.store.errors import StoreUnreachable

    url = resolve_url("postgresql://u:s3cret@nosuchhost.invalid/db")
    err = OperationalError("connect", {}, Exception(
        "failed to resolve host 'nosuchhost.invalid': [Errno -2] Name or service not known"))
    translated = translate_error(err, url, "--db")
    assert isinstance(translated, StoreUnreachable)
    assert "s3cret" not in str(translated) and "nosuchhost.invalid" in str(translated)
