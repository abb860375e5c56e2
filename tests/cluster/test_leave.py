"""`fleet up` then `fleet leave` on loopback, beside an unrelated Ray instance that must survive:
leave stops exactly the processes its own `up` started."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from specfleet.cluster import noderecord

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def env_for(tmp_path: Path) -> dict[str, str]:
    drop = ("RAY_ADDRESS", "SPECFLEET_ADDRESS", "RAY_AUTH_TOKEN")
    return {k: v for k, v in os.environ.items() if k not in drop} | {
        "RAY_AUTH_TOKEN_PATH": str(tmp_path / "auth_token"),
        "SPECFLEET_HOME": str(tmp_path / "home"),
        "RAY_AUTH_MODE": "token",
        "RAY_USAGE_STATS_ENABLED": "0",
    }


def run(cmd: list[str], env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def running(proc: psutil.Process | int) -> bool:
    """Alive and not a zombie (exited, waiting for its parent, maybe init, to reap it)."""
    try:
        proc = psutil.Process(proc) if isinstance(proc, int) else proc
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.slow
def test_leave_stops_only_this_hosts_node(tmp_path: Path) -> None:
    env = env_for(tmp_path)
    short = tempfile.mkdtemp(prefix="sfl-")  # Ray's socket paths must stay under 108 bytes
    other_dir, mine_dir = f"{short}/other", f"{short}/mine"
    other_port = free_port()
    try:
        up = run([str(BIN / "specfleet"), "fleet", "up", "--name", "lv", "--node-ip",
                  "127.0.0.1", "--port", str(free_port()), "--num-cpus", "1",
                  "--temp-dir", mine_dir], env)
        assert up.returncode == 0, up.stderr[-2000:]
        # Again on the head: it was Ray's "ray start --head failed: ConnectionError: ...".
        again_up = run([str(BIN / "specfleet"), "fleet", "up", "--name", "lv", "--node-ip",
                        "127.0.0.1", "--port", str(free_port()), "--temp-dir", mine_dir], env)
        assert again_up.returncode == 2, again_up.stderr[-2000:]
        assert again_up.stderr.startswith("error: this machine already runs the fleet head lv "
                                          "(127.0.0.1:"), again_up.stderr
        assert again_up.stderr.count("\n") == 1
        # Someone else's Ray on the same machine, same user, started after ours.
        other = run([str(BIN / "ray"), "start", "--head", "--port", str(other_port),
                     "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                     "--include-dashboard", "false", "--temp-dir", other_dir,
                     # Ray's two fixed default ports are taken by our node on this address.
                     "--ray-client-server-port", str(free_port()),
                     "--dashboard-agent-listen-port", str(free_port())], env)
        assert other.returncode == 0, other.stderr[-2000:]
        record = json.loads((tmp_path / "home" / noderecord.RECORD_NAME).read_text())
        assert record["host"] == "lv" and record["head"] and record["temp_dir"] == mine_dir
        assert record["pids"], "up recorded no process"
        supervisor = record["supervisor_pid"]
        assert supervisor and psutil.pid_exists(supervisor), "up left no supervisor"
        mine = noderecord.node_processes(mine_dir)
        theirs = noderecord.node_processes(other_dir)
        assert mine and theirs
        # `ray start --head` leaves its Ray Client server (port 10001) outside both.
        client = noderecord.client_servers(record["address"])
        assert client, "no Ray Client server named the head's address"
        mine += client
        left = run([str(BIN / "specfleet"), "fleet", "leave"], env)
        assert left.returncode == 0, left.stderr[-2000:]
        assert left.stdout.strip() == "host lv left the fleet"
        assert not [p for p in mine if running(p)], "a process of our node survived leave"
        assert all(running(p) for p in theirs), "leave stopped another Ray instance"
        assert not running(supervisor), "leave left the supervisor running"
        assert not (tmp_path / "home" / noderecord.RECORD_NAME).exists()
        again = run([str(BIN / "specfleet"), "fleet", "leave"], env)
        assert again.returncode == 2 and "nothing to leave" in again.stderr
    finally:  # stop only what this test started, found by its own temp dirs and record
        record_file = tmp_path / "home" / noderecord.RECORD_NAME
        if record_file.exists():  # a failure before `leave`: its supervisor would rejoin
            left_over = json.loads(record_file.read_text())
            with contextlib.suppress(psutil.Error, TypeError):
                noderecord.stop_processes([psutil.Process(left_over["supervisor_pid"])])
            noderecord.stop_processes(noderecord.client_servers(left_over["address"]))
        noderecord.stop_processes(noderecord.client_servers(f"127.0.0.1:{other_port}"))
        for temp_dir in (mine_dir, other_dir):
            noderecord.stop_processes(noderecord.node_processes(temp_dir), grace_s=10)
        shutil.rmtree(short, ignore_errors=True)


def test_an_unreaped_process_counts_as_stopped_and_one_ignoring_sigterm_is_killed() -> None:
    # The parent spawns a child that exits at once and never reaps it: a zombie not ours to
    # reap, as Ray's dashboard leaves behind. A second child ignores SIGTERM.
    parent = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys, time\n"
         "z = subprocess.Popen([sys.executable, '-c', 'pass'])\n"
         "s = subprocess.Popen([sys.executable, '-c', 'import signal, time; "
         "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(1, flush=True); "
         "time.sleep(120)'], stdout=subprocess.PIPE)\n"
         "s.stdout.readline()  # SIGTERM is ignored from here on\n"
         "print(z.pid, s.pid, flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True)
    try:
        zombie_pid, stubborn_pid = map(int, parent.stdout.readline().split())
        zombie, stubborn = psutil.Process(zombie_pid), psutil.Process(stubborn_pid)
        psutil.wait_procs([], timeout=0)
        for _ in range(100):  # bounded: the child exits at once
            if zombie.status() == psutil.STATUS_ZOMBIE:
                break
            time.sleep(0.05)
        assert zombie.status() == psutil.STATUS_ZOMBIE
        started = time.monotonic()
        assert noderecord.stop_processes([zombie, stubborn], grace_s=4) == 2
        took = time.monotonic() - started
        assert not running(stubborn)
        # One grace period for the process ignoring SIGTERM, none for the zombie.
        assert 4 <= took < 7, took
    finally:
        parent.kill()
        parent.wait(timeout=10)
