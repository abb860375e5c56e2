"""Shared fixtures: a throwaway PostgreSQL server, and a store URL per test on both backends.

`pg_server` (session) installs PostgreSQL's Debian package if `initdb` is missing, then runs a
private cluster as a non-root user on a free loopback port with its socket in a temp dir, and
stops it at the end. If it cannot start, every test that asked for it FAILS (never skips).
`pg_url` is a fresh empty database per test; `store_url` runs a test on SQLite and PostgreSQL.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from xdist.scheduler import LoadFileScheduling

from tests.installs import machine_install_lock


def _session_dir(prefix: str) -> str:
    """A folder for this test process, removed when it exits (each run left two in /tmp)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


# `make test` runs three pytest-xdist workers: each keeps its own machine lock and journal (a
# worker's timed runs must not wait on the other's), set before anything reads them.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["SPECFLEET_RUNTIME_DIR"] = _session_dir("specfleet-rt-")
    os.environ["SPECFLEET_JOURNAL_DIR"] = _session_dir("specfleet-journal-")
# Before anything imports torch: idle OpenMP threads must sleep, not spin, or every torch
# forward slows 5-10x while Ray workers and servers share the 2 cores (measured here).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# One BLAS / OpenMP thread per process (inherited by Ray workers and subprocesses): the suite
# runs several model processes at once on 2 cores, where a second thread per op only waits.
for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "SPECFLEET_THREADS"):
    os.environ.setdefault(_threads, "1")
# A machine lock and a result journal per test session: other sessions on this box (other
# checkouts' suites) never wait on our timed runs, and no journal outlives the session.
if "SPECFLEET_RUNTIME_DIR" not in os.environ:
    os.environ["SPECFLEET_RUNTIME_DIR"] = _session_dir("specfleet-rt-")
# Workers skip their start-up self-test here (tests/workers/test_selftest.py proves it, and
# each worker process would pay it once); a test that needs it passes self_test=True.
os.environ.setdefault("SPECFLEET_SELFTEST", "0")
if "SPECFLEET_JOURNAL_DIR" not in os.environ:
    os.environ["SPECFLEET_JOURNAL_DIR"] = _session_dir("specfleet-journal-")

# Modules that start Ray fleets, real models, browsers, servers or namespaces, slowest first
# (measured with --durations): `make test` starts them first so that its workers end together;
# they are all `slow`, so `make test-fast` (-m "not slow") leaves them out.
SLOW_MODULES = (
    "tests/cluster/test_netfleet_faults.py", "tests/cluster/test_netfleet.py",
    "tests/cluster/test_faults.py", "tests/test_trust.py", "tests/cluster/test_scheduler.py",
    "tests/engine/runners/test_greedy_parity.py", "tests/cluster/test_fleet.py",
    "tests/engine/test_gemma3.py", "tests/cli/test_generate_cli.py", "tests/serve/test_browser.py",
    "tests/cli/test_matrix_cli.py", "tests/cluster/test_leave.py", "tests/cli/test_bad_input.py",
    "tests/workers/test_actor.py", "tests/test_packaging.py", "tests/cluster/test_machinelock.py",
    "tests/cli/test_machine_lock_cli.py",
    "tests/engine/runners/test_conformance.py", "tests/report/test_replay.py",
    "tests/cli/test_parity_cli.py", "tests/store/test_concurrency.py",
    "tests/workers/test_peers.py", "tests/engine/runners/test_families_mlx.py",
    "tests/store/test_migrate.py", "tests/workers/test_host.py",
    "tests/engine/runners/test_families_torch.py", "tests/engine/runners/test_mlx.py",
    "tests/serve/test_network.py", "tests/workers/test_selftest.py",
    "tests/engine/runners/test_torch.py", "tests/cluster/test_modelcheck.py",
    "tests/cluster/test_locks.py", "tests/cli/test_interrupt_cli.py",
    "tests/cluster/test_fleet_listeners.py", "tests/cli/test_job_resume_fleet.py",
    "tests/cli/test_stderr_reader_gone.py",
)


# Modules that mostly wait (faults held for seconds, leases running out, toy runs), longest
# first: under `make test` (`--dist loadfile`, three workers) worker gw0 runs these (~335 s alone)
# while the other two run the modules that compute, so the waits fill the box instead of
# stretching it.
WAITING_MODULES = (
    "tests/cluster/test_netfleet_faults.py", "tests/cluster/test_faults.py",
    "tests/cluster/test_scheduler.py",
)


class _LaneScheduling(LoadFileScheduling):
    """xdist's `loadfile` in two lanes: gw0 takes WAITING_MODULES in order, every other worker
    the rest; a worker whose lane is empty takes from the other's."""

    def _assign_work_unit(self, node) -> None:
        waits = node.gateway.id == "gw0"
        modules = list(self.workqueue)
        chosen = next((m for m in modules if (m in WAITING_MODULES) == waits), modules[0])
        self.workqueue.move_to_end(chosen, last=False)  # the base class pops the first
        super()._assign_work_unit(node)


@pytest.hookimpl(optionalhook=True)  # `-p no:xdist` runs a module alone, as it did
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """Lanes for `--dist loadfile` (what `make test` uses); xdist's own scheduler otherwise."""
    return _LaneScheduling(config, log) if config.getoption("dist") == "loadfile" else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Slow modules first, marked `slow`. `make test` runs `--dist loadfile`: a module runs
    whole on one worker, so module-scoped fleets and models start once (xdist 3.8's
    `loadgroup` adds nothing under pytest 9: its group suffix never reaches the node id).
    Namespace fleets may run at once: each claims its own /24 (tools/netfleet.py)."""
    rank = {module: i for i, module in enumerate(SLOW_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))
    for item in items:
        if item.nodeid.split("::", 1)[0] in rank:
            item.add_marker(pytest.mark.slow)


def _built_once(build):
    """typer's `CliRunner.invoke` rebuilt the whole click command tree from the Typer app on
    every call (~30 ms each, a sixth of `make test`'s in-process CLI time); the tree does
    not change once the app is imported, so each app is built once and its command reused
    (once per value of the one variable the build reads: typer's completion-test switch)."""
    built: dict[tuple, tuple[object, object]] = {}  # key -> (app, command): app kept alive

    def get_command(app):
        key = (id(app), os.environ.get("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION"))
        if key not in built:
            built[key] = (app, build(app))
        return built[key][1]

    return get_command


def _build_each_app_once() -> None:
    import typer.main
    import typer.testing

    typer.testing._get_command = _built_once(typer.main.get_command)  # type: ignore[attr-defined]


_build_each_app_once()


# SIGINT and SIGTERM as Python sets them for a command started from a terminal. A test that
# left one ignored (the CLI's own exit path ignores both) made every later test's Ctrl-C check
# on its xdist worker pass through, and the subprocesses those tests start inherit the ignored
# signal (two failures under `make test`, 2026-12-07).
_STOPPING_HANDLERS = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


@pytest.fixture(autouse=True)
def _stopping_signals_as_a_terminal_gives() -> Iterator[None]:
    """Each test starts with Python's own SIGINT and SIGTERM handlers; one that leaves either
    ignored is named in a warning (a handler of Ray's driver, set by `ray.init`, is put back
    without one)."""
    for sig, handler in _STOPPING_HANDLERS.items():
        if signal.getsignal(sig) is not handler:
            signal.signal(sig, handler)
    yield
    ignored = [signal.Signals(sig).name for sig in _STOPPING_HANDLERS
               if signal.getsignal(sig) is signal.SIG_IGN]
    if ignored:
        warnings.warn(f"the test left {' and '.join(ignored)} ignored", stacklevel=1)


PG_SUPERUSER = "postgres"
# A role that must log in with a password (pg_hba: scram), for bad-credential tests.
PG_PASSWORD_USER = "specfleet_pw"
PG_PASSWORD = "right-password"
_START_OPTIONS = (
    "-c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off "
    "-c full_page_writes=off -c max_connections=200"
)


@dataclass(frozen=True)
class PgServer:
    """A running throwaway PostgreSQL cluster."""

    port: int
    root: Path
    bin_dir: Path
    host: str = "127.0.0.1"

    def url(self, database: str = "postgres", user: str = PG_SUPERUSER,
            password: str | None = None) -> str:
        auth = f"{user}:{password}" if password is not None else user
        return f"postgresql+psycopg://{auth}@{self.host}:{self.port}/{database}"

    def admin(self):
        import psycopg

        return psycopg.connect(
            host=self.host, port=self.port, user=PG_SUPERUSER, dbname="postgres", autocommit=True
        )

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with self.admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with self.admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Stop the server (fault tests: the store goes away mid-matrix)."""
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "-w",
              "stop"], "stop")

    def start(self) -> None:
        """Start it again on the same port."""
        options = f"{_START_OPTIONS} -p {self.port} -k {self.root}"
        log = self.root / "server.log"
        _run([str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-l", str(log),
              "-w", "-t", "60", "-o", options, "start"], "start", log)


def _find_pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _install_postgres() -> None:
    prefix: list[str] = []
    if os.geteuid() != 0:
        if not shutil.which("sudo"):
            pytest.fail("PostgreSQL is not installed and there is no root or sudo to install it")
        prefix = ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*prefix, "apt-get", "install", "-y", "-q", "postgresql"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        subprocess.run([*prefix, "apt-get", "update", "-q"], env=env, capture_output=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"apt-get install postgresql failed: {done.stderr[-2000:]}")


def _as_pg_user(cmd: list[str]) -> list[str]:
    """Run as `postgres` when we are root (PostgreSQL refuses to run as root)."""
    if os.geteuid() != 0:
        return cmd
    if shutil.which("runuser"):
        return ["runuser", "-u", PG_SUPERUSER, "--", *cmd]
    return ["su", PG_SUPERUSER, "-s", "/bin/sh", "-c", shlex.join(cmd)]


def _run(cmd: list[str], what: str, log: Path | None = None) -> None:
    done = subprocess.run(_as_pg_user(cmd), capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        tail = log.read_text()[-2000:] if log and log.exists() else ""
        pytest.fail(f"PostgreSQL {what} failed ({done.returncode}): {done.stderr[-2000:]} {tail}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _make_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="specfleet-pg-"))
    if os.geteuid() == 0:
        user = pwd.getpwnam(PG_SUPERUSER)
        os.chown(root, user.pw_uid, user.pw_gid)
    root.chmod(0o700)
    return root


def _init_cluster(bin_dir: Path, root: Path) -> Path:
    data = root / "data"
    _run([str(bin_dir / "initdb"), "-A", "trust", "-U", PG_SUPERUSER, "-E", "UTF8",
          "--no-sync", "-D", str(data)], "initdb")
    hba = data / "pg_hba.conf"
    # First match wins: the password role must authenticate, everyone else is trusted.
    rule = f"host all {PG_PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n"
    hba.write_text(rule + hba.read_text())
    return data


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """A private PostgreSQL cluster for the whole session (fails loudly if it cannot run)."""
    bin_dir = _find_pg_bin()
    if bin_dir is None:
        with machine_install_lock():
            bin_dir = _find_pg_bin()  # the other worker may have installed it meanwhile
            if bin_dir is None:
                _install_postgres()
                bin_dir = _find_pg_bin()
    if bin_dir is None:
        pytest.fail("PostgreSQL's initdb not found even after apt-get install postgresql")
    root = _make_root()
    data = _init_cluster(bin_dir, root)
    port, log = _free_port(), root / "server.log"
    options = f"{_START_OPTIONS} -p {port} -k {root}"
    _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(log), "-w", "-t", "60",
          "-o", options, "start"], "start", log)
    server = PgServer(port=port, root=root, bin_dir=bin_dir)
    try:
        with server.admin() as conn:
            conn.execute(f"CREATE ROLE {PG_PASSWORD_USER} LOGIN PASSWORD '{PG_PASSWORD}'")
        yield server
    finally:
        with contextlib.suppress(Exception):
            _run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"], "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test (dropped afterwards)."""
    name = pg_server.create_database()
    yield pg_server.url(name)
    pg_server.drop_database(name)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(request, tmp_path: Path) -> str:
    """A fresh database URL for this test: once on SQLite (temp dir), once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'specfleet.db'}"
    return request.getfixturevalue("pg_url")
